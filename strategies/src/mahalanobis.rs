//! The nearest group mean by Mahalanobis distance under one covariance shared by every group
//! (a tied-covariance Gaussian: linear discriminant analysis), the covariance being the pooled
//! within-group covariance of the features shrunk towards a scaled identity by Ledoit and
//! Wolf's estimator.
//!
//! - Distance (Lee et al. 2018, "A Simple Unified Framework for Detecting Out-of-Distribution
//!   Samples and Adversarial Attacks", eq. 2): `M_g(x) = (x − μ_g)ᵀ Σ⁻¹ (x − μ_g)`, `Σ` the
//!   tied covariance; an input goes to `argmin_g M_g(x)`. Across groups only
//!   `c_g − 2 v_g·x` differs, with `v_g = Σ⁻¹μ_g` and `c_g = μ_gᵀΣ⁻¹μ_g` ([`Nearest`]).
//! - Covariance: `S = W / n` with `W = Σ_g Σ_{x∈g} (x − μ_g)(x − μ_g)ᵀ` over `n` samples
//!   ([`Pooled`]). With fewer samples than dimensions (a task of 120 documents, 384 features)
//!   `S` is singular, so it is shrunk (Ledoit & Wolf 2004, "A well-conditioned estimator for
//!   large-dimensional covariance matrices", J. Multivariate Anal. 88, Lemmas 3.2–3.4 and
//!   Theorem 3.1, in scikit-learn's form `ledoit_wolf_shrinkage`):
//!   `Σ = (1 − ρ)·S + ρ·m·I`, `m = tr S / d`, `δ² = ‖S − m·I‖²_F`,
//!   `β̄² = (Σ_i ‖x_i − μ_{g(i)}‖⁴ / n − ‖S‖²_F) / n`, `ρ = min(β̄², δ²) / δ²`.
//!   `W`, `n` and `Σ_i ‖x_i − μ‖⁴` are sums, so groups can be added one task at a time without
//!   keeping their samples.

/// Pooled within-group statistics of features `[d]`, group by group ([`Pooled::add_group`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Pooled {
    /// The feature dimension `d` (0 before the first group).
    pub dim: usize,
    /// `W = Σ_g Σ_{x∈g} (x − μ_g)(x − μ_g)ᵀ`, row-major `[d, d]`.
    pub scatter: Vec<f64>,
    /// `n`: samples added.
    pub count: usize,
    /// `Σ_i ‖x_i − μ_{g(i)}‖⁴` (the Ledoit–Wolf `β̄²` term).
    pub fourth: f64,
}

impl Pooled {
    /// Adds one group's samples, each `[d]`, centred on the group's own mean, and returns that
    /// mean `[d]`. An empty group adds nothing and returns an empty mean. `None` when a row's
    /// length differs from `d` (the first group's rows fix `d`).
    pub fn add_group(&mut self, rows: &[&[f32]]) -> Option<Vec<f64>> {
        let Some(first) = rows.first() else {
            return Some(Vec::new());
        };
        let d = first.len();
        if self.dim == 0 {
            self.dim = d;
            self.scatter = vec![0.0; d * d];
        }
        if d != self.dim || rows.iter().any(|r| r.len() != d) {
            return None;
        }
        let mut mean = vec![0.0f64; d];
        for r in rows {
            for (m, &v) in mean.iter_mut().zip(r.iter()) {
                *m += f64::from(v);
            }
        }
        mean.iter_mut().for_each(|m| *m /= rows.len() as f64);
        let mut c = vec![0.0f64; d];
        for r in rows {
            for ((c, &v), m) in c.iter_mut().zip(r.iter()).zip(&mean) {
                *c = f64::from(v) - m;
            }
            for (i, &ci) in c.iter().enumerate() {
                let row = &mut self.scatter[i * d..(i + 1) * d];
                for (w, &cj) in row.iter_mut().zip(&c) {
                    *w += ci * cj;
                }
            }
            let sq: f64 = c.iter().map(|v| v * v).sum();
            self.fourth += sq * sq;
        }
        self.count += rows.len();
        Some(mean)
    }

    /// The shrunk covariance `Σ` `[d, d]` (row-major) and the shrinkage `ρ ∈ [0, 1]`; `None`
    /// before any sample. `ρ = 1` (a scaled identity) where `S` is already one (`δ² = 0`).
    pub fn covariance(&self) -> Option<(Vec<f64>, f64)> {
        let (d, n) = (self.dim, self.count as f64);
        if self.count == 0 || d == 0 {
            return None;
        }
        let s: Vec<f64> = self.scatter.iter().map(|w| w / n).collect();
        let m = (0..d).map(|i| s[i * d + i]).sum::<f64>() / d as f64;
        let s2: f64 = s.iter().map(|v| v * v).sum();
        let delta = s2 - 2.0 * m * m * d as f64 + m * m * d as f64;
        let beta = ((self.fourth / n - s2) / n).max(0.0);
        let rho = if delta <= 0.0 {
            1.0
        } else {
            beta.min(delta) / delta
        };
        let mut out: Vec<f64> = s.iter().map(|v| (1.0 - rho) * v).collect();
        for i in 0..d {
            out[i * d + i] += rho * m;
        }
        Some((out, rho))
    }
}

/// The inverse of the symmetric positive definite `a` `[d, d]` (row-major) through its
/// Cholesky factor `a = L·Lᵀ`; `None` when a pivot is not positive (`a` not positive definite).
pub fn inverse_spd(a: &[f64], d: usize) -> Option<Vec<f64>> {
    if a.len() != d * d {
        return None;
    }
    let mut l = vec![0.0f64; d * d];
    for i in 0..d {
        for j in 0..=i {
            let dot: f64 = (0..j).map(|k| l[i * d + k] * l[j * d + k]).sum();
            let v = a[i * d + j] - dot;
            if i == j {
                if v <= 0.0 || !v.is_finite() {
                    return None;
                }
                l[i * d + i] = v.sqrt();
            } else {
                l[i * d + j] = v / l[j * d + j];
            }
        }
    }
    // L⁻¹ by forward substitution, column by column; then a⁻¹ = L⁻ᵀ·L⁻¹.
    let mut li = vec![0.0f64; d * d];
    for c in 0..d {
        for i in c..d {
            let rhs = if i == c { 1.0 } else { 0.0 };
            let dot: f64 = (c..i).map(|k| l[i * d + k] * li[k * d + c]).sum();
            li[i * d + c] = (rhs - dot) / l[i * d + i];
        }
    }
    let mut inv = vec![0.0f64; d * d];
    for i in 0..d {
        for j in 0..=i {
            let v: f64 = (i..d).map(|k| li[k * d + i] * li[k * d + j]).sum();
            inv[i * d + j] = v;
            inv[j * d + i] = v;
        }
    }
    Some(inv)
}

/// The nearest of some group means under one precision matrix `P = Σ⁻¹`: what every row's
/// routing needs, computed once per set of means.
#[derive(Clone, Debug, PartialEq)]
pub struct Nearest {
    /// `v_g = P·μ_g` `[d]` each.
    v: Vec<Vec<f64>>,
    /// `c_g = μ_gᵀ·P·μ_g`.
    c: Vec<f64>,
}

impl Nearest {
    /// The router over `means` (each `[d]`) under `pooled`'s shrunk covariance; `None` before
    /// any sample, or when a mean's length is not `d` or the covariance cannot be inverted.
    pub fn new(pooled: &Pooled, means: &[Vec<f64>]) -> Option<Self> {
        let d = pooled.dim;
        let (cov, _) = pooled.covariance()?;
        let p = inverse_spd(&cov, d)?;
        let mut v = Vec::with_capacity(means.len());
        let mut c = Vec::with_capacity(means.len());
        for mu in means {
            if mu.len() != d {
                return None;
            }
            let pm: Vec<f64> = (0..d)
                .map(|i| {
                    p[i * d..(i + 1) * d]
                        .iter()
                        .zip(mu)
                        .map(|(a, b)| a * b)
                        .sum()
                })
                .collect();
            c.push(pm.iter().zip(mu).map(|(a, b)| a * b).sum());
            v.push(pm);
        }
        Some(Self { v, c })
    }

    /// The index of the mean nearest to `x` `[d]` (the first of equals): `argmin_g c_g − 2
    /// v_g·x`, which orders the groups as `M_g(x)` does.
    pub fn nearest(&self, x: &[f32]) -> usize {
        let score = |g: usize| -> f64 {
            let dot: f64 = self.v[g]
                .iter()
                .zip(x)
                .map(|(a, &b)| a * f64::from(b))
                .sum();
            self.c[g] - 2.0 * dot
        };
        (0..self.c.len()).fold(0, |best, g| if score(g) < score(best) { g } else { best })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two groups of 3-dimensional samples (values chosen by hand).
    fn groups() -> (Vec<[f32; 3]>, Vec<[f32; 3]>) {
        (
            vec![[1.0, 2.0, 0.5], [2.0, 1.0, -0.5], [0.0, 1.5, 1.0]],
            vec![[-1.0, 0.0, 2.0], [-2.0, 1.0, 1.0]],
        )
    }

    fn pooled() -> (Pooled, Vec<Vec<f64>>) {
        let (a, b) = groups();
        let mut p = Pooled::default();
        let ra: Vec<&[f32]> = a.iter().map(|r| r.as_slice()).collect();
        let rb: Vec<&[f32]> = b.iter().map(|r| r.as_slice()).collect();
        let ma = p.add_group(&ra).unwrap();
        let mb = p.add_group(&rb).unwrap();
        (p, vec![ma, mb])
    }

    /// The group-centred samples' Ledoit–Wolf covariance equals scikit-learn 1.9.1's
    /// `sklearn.covariance.ledoit_wolf(X, assume_centered=True)` on the same centred rows
    /// (X = [[0, 0.5, 1/6], [1, -0.5, -5/6], [-1, 0, 2/3], [0.5, -0.5, 0.5], [-0.5, 0.5, -0.5]]),
    /// its values printed with `repr`.
    #[test]
    fn ledoit_wolf_matches_scikit_learn() {
        let (p, means) = pooled();
        assert_eq!(p.count, 5);
        assert_eq!(means[0], vec![1.0, 1.5, 1.0 / 3.0]);
        assert_eq!(means[1], vec![-1.5, 0.5, 1.5]);
        let (cov, rho) = p.covariance().unwrap();
        let want_rho = SK_RHO;
        assert!((rho - want_rho).abs() < 1e-10, "rho {rho} vs {want_rho}");
        for (got, want) in cov.iter().zip(SK_COV) {
            assert!((got - want).abs() < 1e-10, "{cov:?} vs {SK_COV:?}");
        }
    }

    const SK_RHO: f64 = 0.8312274368231043;
    const SK_COV: [f64; 9] = [
        0.3706979542719615,
        -0.033754512635379146,
        -0.033754512635379146,
        -0.033754512635379146,
        0.3200661853188928,
        0.0,
        -0.033754512635379146,
        0.0,
        0.3425691937424789,
    ];

    /// `inverse_spd` inverts: `A·A⁻¹ = I` on the shrunk covariance, and refuses a matrix that is
    /// not positive definite.
    #[test]
    fn cholesky_inverse_inverts() {
        let (p, _) = pooled();
        let (cov, _) = p.covariance().unwrap();
        let inv = inverse_spd(&cov, 3).unwrap();
        for i in 0..3 {
            for j in 0..3 {
                let v: f64 = (0..3).map(|k| cov[i * 3 + k] * inv[k * 3 + j]).sum();
                let want = if i == j { 1.0 } else { 0.0 };
                assert!((v - want).abs() < 1e-12, "({i}, {j}): {v}");
            }
        }
        assert!(inverse_spd(&[1.0, 2.0, 2.0, 1.0], 2).is_none());
        assert!(inverse_spd(&[1.0, 0.0, 0.0], 2).is_none());
    }

    /// Mahalanobis picks differently from Euclidean distance where the shared covariance is
    /// long along one axis. Group 0: (±10, ±1), mean (0, 0); group 1: one sample, (6, 3). By
    /// hand: W = diag(400, 4), n = 5, S = diag(80, 0.8), m = 40.4, δ² = 3136.32,
    /// Σ‖x − μ‖⁴ = 4·101², β̄² = (8160.8 − 6400.64) / 5, ρ = 352.032 / 3136.32; scikit-learn's
    /// `ledoit_wolf` gives the same ρ and Σ = diag(75.5552, 5.2448), and numpy's
    /// `(x − μ)ᵀ Σ⁻¹ (x − μ)` for x = (6, 0.9): 0.6309 to μ₀, 0.8408 to μ₁ (Euclidean: 6.07
    /// and 2.1); for x = (6, 2.7): 1.8664 and 0.0172.
    #[test]
    fn the_shared_covariance_decides_the_nearest_mean() {
        let mut p = Pooled::default();
        let a = [[10.0f32, 1.0], [10.0, -1.0], [-10.0, 1.0], [-10.0, -1.0]];
        let mu0 = p
            .add_group(&a.iter().map(|r| r.as_slice()).collect::<Vec<_>>())
            .unwrap();
        let mu1 = p.add_group(&[[6.0f32, 3.0].as_slice()]).unwrap();
        assert_eq!(p.scatter, vec![400.0, 0.0, 0.0, 4.0]);
        assert_eq!(p.fourth, 4.0 * 101.0 * 101.0);
        let (cov, rho) = p.covariance().unwrap();
        assert!((rho - 0.11224364860728495).abs() < 1e-12, "{rho}");
        assert!((cov[0] - 75.55515151515151).abs() < 1e-9, "{cov:?}");
        assert!((cov[3] - 5.244848484848484).abs() < 1e-9, "{cov:?}");
        let r = Nearest::new(&p, &[mu0.clone(), mu1.clone()]).unwrap();
        assert_eq!(r.nearest(&[6.0, 0.9]), 0);
        assert_eq!(r.nearest(&[6.0, 2.7]), 1);
        // The scores differ by the Mahalanobis distances' differences (fᵀPf cancels).
        let m = |x: [f32; 2], g: usize| -> f64 {
            let dot: f64 = r.v[g].iter().zip(x).map(|(a, b)| a * f64::from(b)).sum();
            r.c[g] - 2.0 * dot
        };
        // 0.9 is 0.899999976 in f32, which moves the gap by about 3e-8.
        let gap = m([6.0, 0.9], 1) - m([6.0, 0.9], 0);
        assert!(
            (gap - (0.8408250519990758 - 0.6309103906687896)).abs() < 1e-7,
            "{gap}"
        );
        assert!(Nearest::new(&p, &[vec![0.0; 3]]).is_none());
    }
}
