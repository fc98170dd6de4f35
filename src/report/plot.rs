//! Drawing: every figure is rendered in memory (an SVG string, an RGB buffer encoded as PNG)
//! and written with [`write_atomic`]; the figures themselves are drawn in `figures.rs`.
//!
//! Figures stay bounded however long the stream: a heatmap draws at most
//! [`MAX_MATRIX_CELLS`] cells a side (blocks of tasks averaged beyond that, as its title says),
//! the per-task curves at most [`MAX_CURVES`] tasks (evenly spaced) and their mean, the memory
//! figure at most [`MAX_BARS`] bars (the peak of each group of tasks), and an axis at most
//! [`MAX_LABELS`] labels; 2,000 tasks of online learning render in seconds, not minutes.

use super::compare::RunRow;
use super::figures::{draw_loss_lr, draw_matrix, draw_memory, draw_rows, draw_task_accuracy};
use super::load::load_run;
use engram_core::fsutil::write_atomic;
use engram_core::train::report::{Report, StepLog};
use engram_core::{Error, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::{Path, PathBuf};

/// Width and height of every figure, in pixels (PNG) or SVG user units.
pub const FIGURE_SIZE: (u32, u32) = (1000, 700);

/// Stems of the figures [`render`] writes (each as `.png` and `.svg`), in order.
pub const FIGURES: [&str; 4] = ["accuracy_matrix", "task_accuracy", "memory", "loss_lr"];

/// The font family every figure uses; [`register_font`] binds it to DejaVu Sans.
pub(super) const FONT: &str = "sans-serif";

/// Distinct line colours for tasks (Tableau 10), reused cyclically past ten tasks.
pub(super) const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// The most cells a side the accuracy heatmap draws; a longer stream's matrix is drawn as the
/// means of square blocks of tasks.
pub const MAX_MATRIX_CELLS: usize = 100;

/// The most tasks whose own accuracy curve is drawn (evenly spaced over the stream), besides
/// the mean over tasks seen.
pub const MAX_CURVES: usize = 20;

/// The most bars of the per-task memory chart; beyond it a bar is the peak of a group of
/// consecutive tasks.
pub const MAX_BARS: usize = 50;

/// The most labels on a task axis; beyond it the labels are thinned to round task numbers.
pub const MAX_LABELS: usize = 20;

/// `engram report DIR [--out OUT]`: reads the run in `dir` and writes every figure of
/// [`FIGURES`] into `out` (default `dir/plots`), created if needed. Without `steps.csv` the
/// `loss_lr` figure is left out.
///
/// # Returns
/// The paths written, PNG then SVG for each figure.
///
/// # Errors
/// As [`load_run`] and [`render`]; [`Error::Usage`] naming `out` when it (or a parent of it)
/// exists and is not a directory, or is a dangling link ([`crate::outpath::check_dir`]);
/// [`Error::Io`] when `out` cannot be created.
pub fn render_dir(dir: &Path, out: Option<&Path>) -> Result<Vec<PathBuf>> {
    let run = load_run(dir)?;
    // One rule for every path engram writes (`crate::outpath`): a file, a dangling link or a
    // path under a file where the directory should be is refused by name, nothing written.
    let out = match out {
        Some(o) => {
            crate::outpath::ensure_dir(o, "--out")?;
            o.to_path_buf()
        }
        None => {
            let plots = dir.join("plots");
            crate::outpath::ensure_dir(&plots, "the figures' directory")?;
            plots
        }
    };
    render(&run.report, &run.steps, &out)
}

/// Renders the figures of `report` and `steps` into the existing directory `out`.
///
/// # Returns
/// The paths written, `NAME.png` then `NAME.svg` for each figure in [`FIGURES`] order
/// (`loss_lr` only when `steps` is not empty).
///
/// # Errors
/// [`Error::Other`] when plotters fails to draw or the PNG cannot be encoded; [`Error::Io`]
/// when a file cannot be written.
pub fn render(report: &Report, steps: &[StepLog], out: &Path) -> Result<Vec<PathBuf>> {
    register_font()?;
    let mut figures = vec![
        Figure::Matrix(report),
        Figure::TaskAccuracy(report),
        Figure::Memory(report),
    ];
    if !steps.is_empty() {
        figures.push(Figure::LossLr(steps, report));
    }
    let mut written = Vec::new();
    for f in figures {
        written.extend(write_figure(&f, out)?);
    }
    Ok(written)
}

/// Registers DejaVu Sans as plotters' `sans-serif` font (once per process).
fn register_font() -> Result<()> {
    static REGISTERED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| {
        plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular()).is_ok()
    });
    if ok {
        Ok(())
    } else {
        Err(Error::Other(
            "report: the embedded DejaVu Sans font could not be parsed".into(),
        ))
    }
}

/// One figure, drawn the same way on any plotters backend.
enum Figure<'a> {
    Matrix(&'a Report),
    TaskAccuracy(&'a Report),
    Memory(&'a Report),
    LossLr(&'a [StepLog], &'a Report),
    Rows(&'a [RunRow]),
}

/// Stem of the comparison figure [`render_rows`] writes.
pub const COMPARE_FIGURE: &str = "compare";

/// Renders the comparison figure of `rows` (`engram compare --plots`, `engram sweep report`)
/// into the existing directory `out`: for each row, ACC and retention as horizontal bars with
/// ± one standard deviation over seeds as whiskers.
///
/// # Returns
/// `compare.png` and `compare.svg` in `out`.
///
/// # Errors
/// As [`render`].
pub fn render_rows(rows: &[RunRow], out: &Path) -> Result<Vec<PathBuf>> {
    register_font()?;
    Ok(write_figure(&Figure::Rows(rows), out)?.to_vec())
}

pub(super) type Drawn<DB> =
    std::result::Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

impl Figure<'_> {
    fn stem(&self) -> &'static str {
        match self {
            Figure::Matrix(_) => FIGURES[0],
            Figure::TaskAccuracy(_) => FIGURES[1],
            Figure::Memory(_) => FIGURES[2],
            Figure::LossLr(..) => FIGURES[3],
            Figure::Rows(_) => COMPARE_FIGURE,
        }
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Drawn<DB> {
        root.fill(&WHITE)?;
        match self {
            Figure::Matrix(r) => draw_matrix(root, r),
            Figure::TaskAccuracy(r) => draw_task_accuracy(root, r),
            Figure::Memory(r) => draw_memory(root, r),
            Figure::LossLr(s, r) => draw_loss_lr(root, s, r),
            Figure::Rows(rows) => draw_rows(root, rows),
        }
    }
}

/// Draws `fig` as SVG and PNG in memory, then writes both atomically into `out`.
fn write_figure(fig: &Figure<'_>, out: &Path) -> Result<[PathBuf; 2]> {
    let stem = fig.stem();
    let fail = |what: &str, e: String| Error::Other(format!("report: {stem}.{what}: {e}"));
    let (w, h) = FIGURE_SIZE;

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, FIGURE_SIZE).into_drawing_area();
        fig.draw(&root).map_err(|e| fail("svg", e.to_string()))?;
        root.present().map_err(|e| fail("svg", e.to_string()))?;
    }

    let mut rgb = vec![0u8; w as usize * h as usize * 3];
    {
        let root = super::glyphs::CrispText(BitMapBackend::with_buffer(&mut rgb, FIGURE_SIZE))
            .into_drawing_area();
        fig.draw(&root).map_err(|e| fail("png", e.to_string()))?;
        root.present().map_err(|e| fail("png", e.to_string()))?;
    }
    let mut png_bytes = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut png_bytes, w, h);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut writer = enc.write_header().map_err(|e| fail("png", e.to_string()))?;
        writer
            .write_image_data(&rgb)
            .map_err(|e| fail("png", e.to_string()))?;
        writer.finish().map_err(|e| fail("png", e.to_string()))?;
    }

    let png_path = out.join(format!("{stem}.png"));
    let svg_path = out.join(format!("{stem}.svg"));
    write_atomic(&png_path, &png_bytes)?;
    write_atomic(&svg_path, svg.as_bytes())?;
    Ok([png_path, svg_path])
}

/// Viridis colour map at `t` in `[0, 1]` (linear between nine reference colours).
pub(super) fn viridis(t: f64) -> RGBColor {
    const STOPS: [(u8, u8, u8); 9] = [
        (68, 1, 84),
        (71, 44, 122),
        (59, 81, 139),
        (44, 113, 142),
        (33, 144, 141),
        (39, 173, 129),
        (92, 200, 99),
        (170, 220, 50),
        (253, 231, 37),
    ];
    let t = if t.is_finite() {
        t.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let x = t * (STOPS.len() - 1) as f64;
    let i = (x.floor() as usize).min(STOPS.len() - 2);
    let f = x - i as f64;
    let lerp = |a: u8, b: u8| (a as f64 + (b as f64 - a as f64) * f).round() as u8;
    let (a, b) = (STOPS[i], STOPS[i + 1]);
    RGBColor(lerp(a.0, b.0), lerp(a.1, b.1), lerp(a.2, b.2))
}

/// `T{k}` for an integer tick `v`, empty for a tick between tasks.
pub(super) fn task_tick(v: f64, n: usize, name: impl Fn(usize) -> String) -> String {
    let k = v.round();
    if (v - k).abs() > 1e-6 || k < 0.0 || k as usize >= n {
        String::new()
    } else {
        name(k as usize)
    }
}

/// A tick label with few significant digits (`0.05`, `1.2e-4`, `350`).
pub(super) fn num_tick(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".into()
    } else if !(1e-3..1e5).contains(&a) {
        format!("{v:.1e}")
    } else {
        let s = format!("{v:.4}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// A legend in its own area: a title, then a line sample and a label per entry.
pub(super) fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    entries: &[(String, ShapeStyle)],
) -> Drawn<DB> {
    let (_, h) = area.dim_in_pixel();
    let top = 70;
    let step = ((h as i32 - top - 40) / (entries.len() as i32 + 1)).clamp(10, 26);
    let font = if step >= 20 { 16 } else { 12 };
    let left = TextStyle::from((FONT, font).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
    area.draw(&Text::new(
        title.to_string(),
        (0, top),
        TextStyle::from((FONT, 18).into_font()).pos(Pos::new(HPos::Left, VPos::Center)),
    ))?;
    for (k, (label, style)) in entries.iter().enumerate() {
        let y = top + step * (k as i32 + 1);
        area.draw(&PathElement::new(vec![(0, y), (26, y)], *style))?;
        area.draw(&Text::new(label.clone(), (34, y), left.clone()))?;
    }
    Ok(())
}

/// A bar chart of `(label, value)` with each value written above its bar (when there are at
/// most [`MAX_LABELS`] bars; the axis labels are thinned to as many).
pub(super) fn bars<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    items: &[(String, f64)],
    x_desc: &str,
    y_desc: &str,
    top: f64,
    colour: RGBColor,
) -> Drawn<DB> {
    let k = items.len().max(1);
    let x_fmt = |v: &f64| task_tick(*v, items.len(), |i| items[i].0.clone());
    let mut chart = ChartBuilder::on(area)
        .margin(15)
        .x_label_area_size(70)
        .y_label_area_size(80)
        .build_cartesian_2d(-0.5..k as f64 - 0.5, 0.0..top)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(k.min(MAX_LABELS))
        .y_labels(8)
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&|v| num_tick(*v))
        .x_desc(x_desc)
        .y_desc(y_desc)
        .label_style((FONT, 16))
        .axis_desc_style((FONT, 18))
        .light_line_style(WHITE.mix(0.0))
        .draw()?;
    chart.draw_series(items.iter().enumerate().map(|(i, (_, v))| {
        let x = i as f64;
        Rectangle::new([(x - 0.35, 0.0), (x + 0.35, *v)], colour.filled())
    }))?;
    if items.len() > MAX_LABELS {
        return Ok(());
    }
    let style = TextStyle::from((FONT, 15).into_font()).pos(Pos::new(HPos::Center, VPos::Bottom));
    chart.draw_series(
        items
            .iter()
            .enumerate()
            .map(|(i, (_, v))| Text::new(format!("{v:.1}"), (i as f64, *v), style.clone())),
    )?;
    Ok(())
}

/// Indices of at most `k` items out of `n`, evenly spaced, first and last included, in
/// increasing order: all of `0..n` when `n <= k`.
pub(super) fn spread(n: usize, k: usize) -> Vec<usize> {
    if n <= k {
        return (0..n).collect();
    }
    if k <= 1 {
        return vec![0; k];
    }
    (0..k).map(|i| i * (n - 1) / (k - 1)).collect()
}
