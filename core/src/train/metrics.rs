//! The field's continual-learning metrics, computed from the accuracy matrix.
//!
//! `R[i][j]` is the test accuracy on task `j` after training task `i` (a fraction in `[0, 1]`),
//! for `T` tasks; a cell that was not evaluated is `None` and is skipped by every metric
//! (each metric says which cells it reads). With `T = 1` only ACC is defined.
//!
//! | metric | formula | source |
//! |---|---|---|
//! | ACC | `mean_j R[T−1][j]` | Lopez-Paz & Ranzato 2017, eq. 2 |
//! | BWT | `mean_{j<T−1} (R[T−1][j] − R[j][j])` | Lopez-Paz & Ranzato 2017, eq. 3 |
//! | Forgetting | `mean_{j<T−1} max_{j≤i<T−1} R[i][j] − R[T−1][j]` | Chaudhry et al. 2018 (RWalk), eq. 7–8 |
//! | FWT | `mean_{j>0} (R[j−1][j] − b_j)`, `b_j` = accuracy of the randomly initialised model | Lopez-Paz & Ranzato 2017, eq. 4 |
//! | Retention | `Σ_{j<T−1} R[T−1][j] / Σ_{j<T−1} R[j][j]` | share of old-task accuracy kept |
//! | AIA | `mean_k (1/(k+1)) Σ_{j≤k} R[k][j]` (average incremental accuracy) | Rebuffi et al. 2017 (iCaRL), §4 |

use serde::{Deserialize, Serialize};

/// An accuracy matrix: row `i` = after training task `i`, column `j` = evaluated task.
pub type Matrix = Vec<Vec<Option<f64>>>;

/// The summary metrics of a run (`None` where undefined, serialised as `null`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    /// Average accuracy after the last task.
    pub acc: Option<f64>,
    /// Backward transfer (negative = forgetting).
    pub bwt: Option<f64>,
    /// Average forgetting (positive = forgetting).
    pub forgetting: Option<f64>,
    /// Forward transfer against a randomly initialised model.
    pub fwt: Option<f64>,
    /// Share of old-task accuracy kept.
    pub retention: Option<f64>,
    /// Average incremental accuracy: the mean, over the rows, of each row's average accuracy
    /// on the tasks trained so far ([`average_incremental_accuracy`]). Absent (`null`) in
    /// reports of older versions.
    #[serde(default)]
    pub aia: Option<f64>,
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// Computes [`Metrics`] from a square `T×T` matrix `r` and the random-init baselines `b`
/// (`b[j]` for task `j`; may be empty, then FWT is `None`).
///
/// A non-square matrix (joint training: one row of `T` cells) gives ACC only.
pub fn compute(r: &Matrix, b: &[f64]) -> Metrics {
    let Some(last) = r.last() else {
        return Metrics::default();
    };
    let acc = mean(&last.iter().flatten().copied().collect::<Vec<_>>());
    let t = r.len();
    if r.iter().any(|row| row.len() != t) {
        return Metrics {
            acc,
            ..Metrics::default()
        };
    }
    let aia = average_incremental_accuracy(r);
    if t < 2 {
        return Metrics {
            acc,
            aia,
            ..Metrics::default()
        };
    }
    let cell = |i: usize, j: usize| r[i][j];
    let mut bwt = Vec::new();
    let mut forg = Vec::new();
    let (mut kept, mut learned) = (0.0, 0.0);
    let mut ret_cells = 0;
    for j in 0..t - 1 {
        if let (Some(fin), Some(diag)) = (cell(t - 1, j), cell(j, j)) {
            bwt.push(fin - diag);
            kept += fin;
            learned += diag;
            ret_cells += 1;
        }
        if let Some(fin) = cell(t - 1, j) {
            let best = (j..t - 1)
                .filter_map(|i| cell(i, j))
                .fold(f64::NAN, f64::max);
            if best.is_finite() {
                forg.push(best - fin);
            }
        }
    }
    let fwt: Vec<f64> = (1..t)
        .filter_map(|j| Some(cell(j - 1, j)? - *b.get(j)?))
        .collect();
    Metrics {
        acc,
        bwt: mean(&bwt),
        forgetting: mean(&forg),
        fwt: mean(&fwt),
        retention: (ret_cells > 0 && learned > 0.0).then(|| kept / learned),
        aia,
    }
}

/// Average incremental accuracy (Rebuffi et al. 2017, iCaRL, §4: "the average of the
/// classification accuracies after each batch of classes", i.e. each row's accuracy on the
/// tasks seen so far): `AIA = (1/T) Σ_{k<T} A_k` with `A_k = (1/(k+1)) Σ_{j≤k} R[k][j]`, for
/// a square `T×T` matrix `r`. A row's mean reads only its evaluated cells `j ≤ k`; a row
/// without one is left out of the outer mean. `None` for a matrix that is empty, not square
/// (joint training) or has no evaluated cell on or below its diagonal.
pub fn average_incremental_accuracy(r: &Matrix) -> Option<f64> {
    let t = r.len();
    if r.iter().any(|row| row.len() != t) {
        return None;
    }
    let rows: Vec<f64> = r
        .iter()
        .enumerate()
        .filter_map(|(k, row)| mean(&row[..=k].iter().flatten().copied().collect::<Vec<_>>()))
        .collect();
    mean(&rows)
}

/// Mean and (sample, `n−1`) standard deviation of `values`; `None` when empty.
pub fn mean_std(values: &[f64]) -> Option<(f64, f64)> {
    let m = mean(values)?;
    let sd = if values.len() > 1 {
        (values.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (values.len() - 1) as f64).sqrt()
    } else {
        0.0
    };
    Some((m, sd))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(rows: &[&[f64]]) -> Matrix {
        rows.iter()
            .map(|r| r.iter().map(|&v| Some(v)).collect())
            .collect()
    }

    #[test]
    fn metrics_survive_a_json_round_trip_bit_for_bit() {
        // Reports and aggregates are re-read from JSON on resume; serde_json's default parser
        // may miss the last bit of a long decimal (its `float_roundtrip` feature, enabled in
        // the workspace, does not). Means of accuracies are exactly such decimals.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = (x >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0;
            let text = serde_json::to_string(&v).unwrap();
            let back: f64 = serde_json::from_str(&text).unwrap();
            assert_eq!(back.to_bits(), v.to_bits(), "{text}");
        }
    }

    #[test]
    fn hand_computed_three_tasks() {
        // R = [[0.9, 0.1, 0.1],
        //      [0.6, 0.8, 0.2],
        //      [0.5, 0.7, 0.9]]
        let r = m(&[&[0.9, 0.1, 0.1], &[0.6, 0.8, 0.2], &[0.5, 0.7, 0.9]]);
        let b = [0.1, 0.1, 0.15];
        let x = compute(&r, &b);
        // ACC = (0.5 + 0.7 + 0.9) / 3 = 0.7
        assert!((x.acc.unwrap() - 0.7).abs() < 1e-12);
        // BWT = ((0.5 − 0.9) + (0.7 − 0.8)) / 2 = −0.25
        assert!((x.bwt.unwrap() + 0.25).abs() < 1e-12);
        // Forgetting: task 0 max(0.9, 0.6) − 0.5 = 0.4; task 1 max(0.8) − 0.7 = 0.1 → 0.25
        assert!((x.forgetting.unwrap() - 0.25).abs() < 1e-12);
        // FWT = ((0.1 − 0.1) + (0.2 − 0.15)) / 2 = 0.025
        assert!((x.fwt.unwrap() - 0.025).abs() < 1e-12);
        // Retention = (0.5 + 0.7) / (0.9 + 0.8) = 0.70588…
        assert!((x.retention.unwrap() - 1.2 / 1.7).abs() < 1e-12);
        // AIA = (0.9 + (0.6 + 0.8)/2 + (0.5 + 0.7 + 0.9)/3) / 3 = (0.9 + 0.7 + 0.7) / 3
        //     = 0.76667; the cells above the diagonal (0.1, 0.1, 0.2) are not read.
        assert!((x.aia.unwrap() - 2.3 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn forgetting_uses_best_earlier_row_not_diagonal() {
        // Task 0 improves after task 1 (0.7 → 0.9) and ends at 0.6: forgetting is 0.9 − 0.6.
        let r = m(&[&[0.7, 0.0, 0.0], &[0.9, 0.8, 0.0], &[0.6, 0.8, 0.9]]);
        let x = compute(&r, &[]);
        assert!((x.forgetting.unwrap() - (0.3 + 0.0) / 2.0).abs() < 1e-12);
        assert!((x.bwt.unwrap() - ((0.6 - 0.7) + 0.0) / 2.0).abs() < 1e-12);
        assert_eq!(x.fwt, None);
    }

    #[test]
    fn skipped_cells_are_ignored() {
        let r = vec![
            vec![Some(0.9), None, None],
            vec![None, Some(0.8), None],
            vec![Some(0.6), Some(0.4), Some(1.0)],
        ];
        let x = compute(&r, &[0.1, 0.1, 0.1]);
        assert!((x.acc.unwrap() - 2.0 / 3.0).abs() < 1e-12);
        assert!((x.bwt.unwrap() - (-0.3 - 0.4) / 2.0).abs() < 1e-12);
        // AIA: rows 0.9, 0.8 (row 1 has only R[1][1]), (0.6 + 0.4 + 1.0)/3 → 2.366…/3.
        assert!((x.aia.unwrap() - (0.9 + 0.8 + 2.0 / 3.0) / 3.0).abs() < 1e-12);
        // FWT reads R[j−1][j], none evaluated.
        assert_eq!(x.fwt, None);
    }

    #[test]
    fn single_task_and_joint_give_acc_only() {
        let x = compute(&m(&[&[0.8]]), &[0.1]);
        assert_eq!(x.acc, Some(0.8));
        assert_eq!(x.bwt, None);
        // One task: AIA is that task's accuracy.
        assert_eq!(x.aia, Some(0.8));
        let j = compute(&m(&[&[0.8, 0.9, 1.0]]), &[]);
        assert!((j.acc.unwrap() - 0.9).abs() < 1e-12);
        assert_eq!(j.retention, None);
        assert_eq!(j.aia, None);
    }

    #[test]
    fn mean_std_sample() {
        let (m, s) = mean_std(&[1.0, 2.0, 3.0]).unwrap();
        assert_eq!(m, 2.0);
        assert!((s - 1.0).abs() < 1e-12);
        assert_eq!(mean_std(&[]), None);
    }
}
