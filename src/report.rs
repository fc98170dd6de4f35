//! Pictures and side-by-side tables of finished runs: `engram report` and `engram compare`.
//!
//! Why this module draws its own text: plotters' default `ttf` feature finds fonts through the
//! system (fontconfig), so a plot rendered on a bare machine or in CI would fail or lose every
//! label. engram enables plotters' `ab_glyph` feature instead and registers DejaVu Sans
//! (embedded by the `dejavu` crate, a free licence) as `sans-serif` before drawing, so PNGs carry
//! their axis labels, task names and legends wherever they are rendered. SVGs keep text as
//! `<text>` elements (searchable, and drawn by the viewer's own sans-serif font).
//!
//! Every figure is rendered in memory (an SVG string, an RGB buffer encoded as PNG) and written
//! with [`write_atomic`], so a reader never sees a half-written picture.
//!
//! Figures written by [`render`] into the output directory, each as `NAME.png` and `NAME.svg`
//! of [`FIGURE_SIZE`] pixels:
//!
//! | `NAME` | what it shows | from |
//! |---|---|---|
//! | `accuracy_matrix` | heatmap of `R[i][j]` in %, cells annotated, colour scale | `report.json` |
//! | `task_accuracy` | accuracy of each task after each training task, and their mean | `report.json` |
//! | `memory` | peak bytes per phase and per task's training phase, MiB | `report.json` |
//! | `loss_lr` | training loss and learning rate per logged step, task boundaries | `steps.csv` |
//!
//! `report.json` holds no time series of memory (only peaks per phase and per task), so the
//! memory figure is a bar chart of those peaks.

use engram_core::fsutil::write_atomic;
use engram_core::registry::{Kind, Registry};
use engram_core::train::report::{Report, SCHEMA_VERSION, StepLog};
use engram_core::{Error, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Width and height of every figure, in pixels (PNG) or SVG user units.
pub const FIGURE_SIZE: (u32, u32) = (1000, 700);

/// Stems of the figures [`render`] writes (each as `.png` and `.svg`), in order.
pub const FIGURES: [&str; 4] = ["accuracy_matrix", "task_accuracy", "memory", "loss_lr"];

/// The font family every figure uses; [`register_font`] binds it to DejaVu Sans.
const FONT: &str = "sans-serif";

const MIB: f64 = 1024.0 * 1024.0;

/// Distinct line colours for tasks (Tableau 10), reused cyclically past ten tasks.
const PALETTE: [RGBColor; 10] = [
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

/// A finished run as read from its directory.
#[derive(Clone, Debug)]
pub struct RunFiles {
    /// `report.json`.
    pub report: Report,
    /// The rows of `steps.csv`; empty when the file is absent.
    pub steps: Vec<StepLog>,
}

/// Reads `dir/report.json` and, when present, `dir/steps.csv`.
///
/// # Errors
/// - [`Error::ConfigFile`] naming `dir/report.json` when it is missing (the hint says how to
///   make one, or to pick a `seed-N/` directory of a multi-seed run), is not valid JSON, does
///   not match the report layout, or has another [`SCHEMA_VERSION`];
/// - [`Error::ConfigFile`] naming `steps.csv` when it is malformed (see [`parse_steps_csv`]);
/// - [`Error::Io`] when a file exists but cannot be read.
pub fn load_run(dir: &Path) -> Result<RunFiles> {
    let report = load_report(dir)?;
    let steps_path = dir.join("steps.csv");
    let steps = match engram_core::fsutil::read_text(&steps_path) {
        Ok(text) => parse_steps_csv(&text, &steps_path)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(Error::io(steps_path, e)),
    };
    Ok(RunFiles { report, steps })
}

/// Reads and checks `dir/report.json`.
///
/// # Errors
/// As [`load_run`], for `report.json` only.
pub fn load_report(dir: &Path) -> Result<Report> {
    let path = dir.join("report.json");
    let bytes = match engram_core::fsutil::read_bounded(&path, engram_core::fsutil::MAX_TEXT_BYTES)
    {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let hint = if dir.join("aggregate.json").is_file() {
                format!(
                    "`{}` holds several seeds: name one of its `seed-N/` directories",
                    dir.display()
                )
            } else {
                "`engram run CONFIG --out DIR` writes report.json into DIR".to_string()
            };
            return Err(Error::ConfigFile {
                file: path,
                message: "not found: not the output directory of an engram run".into(),
                hint: Some(hint),
            });
        }
        Err(e) => return Err(Error::io(path, e)),
    };
    let mut report: Report = serde_json::from_slice(&bytes).map_err(|e| Error::ConfigFile {
        file: path.clone(),
        message: format!("not an engram report: {e}"),
        hint: None,
    })?;
    if report.initial_accuracy.is_empty()
        && let Some(b) = &report.random_init_accuracy
    {
        report.initial_accuracy.clone_from(b);
    }
    if report.schema_version != SCHEMA_VERSION {
        return Err(Error::ConfigFile {
            file: path,
            message: format!(
                "report layout version {} is not the version this engram reads ({SCHEMA_VERSION})",
                report.schema_version
            ),
            hint: Some("use the engram version that wrote the report".into()),
        });
    }
    Ok(report)
}

/// Parses `steps.csv` text (columns `task,epoch,step,global_step,loss,lr,samples`, found by
/// name in the header, any order). `file` only names the file in errors.
///
/// # Errors
/// [`Error::ConfigFile`] naming `file` and the 1-based line when the header lacks a column, a
/// row has too few fields, or a field does not parse (integers for counters, floats for `loss`
/// and `lr`; `NaN` and `inf` are accepted and left out of plots).
pub fn parse_steps_csv(text: &str, file: &Path) -> Result<Vec<StepLog>> {
    let err = |line: usize, message: String| Error::ConfigFile {
        file: file.to_path_buf(),
        message: format!("line {line}: {message}"),
        hint: None,
    };
    let mut lines = text.lines().enumerate();
    let Some((_, header)) = lines.next() else {
        return Err(err(1, "empty file: expected a header line".into()));
    };
    let names: Vec<&str> = header.split(',').map(str::trim).collect();
    let col = |name: &str| {
        names
            .iter()
            .position(|n| *n == name)
            .ok_or_else(|| err(1, format!("header has no `{name}` column")))
    };
    let (c_task, c_epoch, c_step, c_global, c_loss, c_lr, c_samples) = (
        col("task")?,
        col("epoch")?,
        col("step")?,
        col("global_step")?,
        col("loss")?,
        col("lr")?,
        col("samples")?,
    );
    let mut out = Vec::new();
    for (i, line) in lines {
        let n = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        let get = |c: usize, name: &str| {
            fields
                .get(c)
                .copied()
                .ok_or_else(|| err(n, format!("missing field `{name}`")))
        };
        let int = |c: usize, name: &str| -> Result<usize> {
            let v = get(c, name)?;
            v.parse()
                .map_err(|_| err(n, format!("`{name}` = `{v}` is not a whole number")))
        };
        let float = |c: usize, name: &str| -> Result<f64> {
            let v = get(c, name)?;
            v.parse()
                .map_err(|_| err(n, format!("`{name}` = `{v}` is not a number")))
        };
        out.push(StepLog {
            task: int(c_task, "task")?,
            epoch: int(c_epoch, "epoch")?,
            step: int(c_step, "step")?,
            global_step: int(c_global, "global_step")?,
            loss: float(c_loss, "loss")?,
            lr: float(c_lr, "lr")?,
            samples: int(c_samples, "samples")?,
        });
    }
    Ok(out)
}

/// `engram report DIR [--out OUT]`: reads the run in `dir` and writes every figure of
/// [`FIGURES`] into `out` (default `dir/plots`), created if needed. Without `steps.csv` the
/// `loss_lr` figure is left out.
///
/// # Returns
/// The paths written, PNG then SVG for each figure.
///
/// # Errors
/// As [`load_run`] and [`render`]; [`Error::Io`] when `out` cannot be created.
pub fn render_dir(dir: &Path, out: Option<&Path>) -> Result<Vec<PathBuf>> {
    let run = load_run(dir)?;
    let out = out.map_or_else(|| dir.join("plots"), Path::to_path_buf);
    std::fs::create_dir_all(&out).map_err(|e| Error::io(&out, e))?;
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

type Drawn<DB> = std::result::Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

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
        let root = BitMapBackend::with_buffer(&mut rgb, FIGURE_SIZE).into_drawing_area();
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
fn viridis(t: f64) -> RGBColor {
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
fn task_tick(v: f64, n: usize, name: impl Fn(usize) -> String) -> String {
    let k = v.round();
    if (v - k).abs() > 1e-6 || k < 0.0 || k as usize >= n {
        String::new()
    } else {
        name(k as usize)
    }
}

/// A tick label with few significant digits (`0.05`, `1.2e-4`, `350`).
fn num_tick(v: f64) -> String {
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

fn draw_matrix<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, r: &Report) -> Drawn<DB> {
    let m = r.accuracy_matrix.len();
    let n = r
        .accuracy_matrix
        .iter()
        .map(Vec::len)
        .max()
        .unwrap_or(0)
        .max(1);
    let rows = m.max(1);
    let (w, _) = root.dim_in_pixel();
    let (main, scale) = root.split_horizontally(w as i32 - 150);

    let row_name = |i: usize| {
        if r.joint {
            "joint".to_string()
        } else {
            format!("T{i}")
        }
    };
    // Row i is drawn at y = rows - 1 - i so that row 0 is at the top, as in the printed matrix.
    let x_fmt = |v: &f64| task_tick(*v, n, |k| format!("T{k}"));
    let y_fmt = |v: &f64| task_tick(*v, rows, |k| row_name(rows - 1 - k));
    let mut chart = ChartBuilder::on(&main)
        .caption("Accuracy matrix R[i][j] (% test accuracy)", (FONT, 26))
        .margin(20)
        .x_label_area_size(70)
        .y_label_area_size(110)
        .build_cartesian_2d(-0.5..n as f64 - 0.5, -0.5..rows as f64 - 0.5)?;
    chart
        .configure_mesh()
        .disable_mesh()
        .x_labels(n)
        .y_labels(rows)
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .x_desc("evaluated task")
        .y_desc("after training task")
        .label_style((FONT, 18))
        .axis_desc_style((FONT, 20))
        .draw()?;

    let cell_font = if n <= 8 { 20 } else { 14 };
    for (i, row) in r.accuracy_matrix.iter().enumerate() {
        let y = (rows - 1 - i) as f64;
        for j in 0..n {
            let x = j as f64;
            let cell = row.get(j).copied().flatten();
            let fill = cell.map_or(RGBColor(220, 220, 220), viridis);
            chart.draw_series(std::iter::once(Rectangle::new(
                [(x - 0.5, y - 0.5), (x + 0.5, y + 0.5)],
                fill.filled(),
            )))?;
            chart.draw_series(std::iter::once(Rectangle::new(
                [(x - 0.5, y - 0.5), (x + 0.5, y + 0.5)],
                WHITE.stroke_width(1),
            )))?;
            let (label, colour) = match cell {
                Some(a) if a < 0.6 => (format!("{:.1}", a * 100.0), WHITE),
                Some(a) => (format!("{:.1}", a * 100.0), BLACK),
                None => ("–".to_string(), BLACK),
            };
            let style = TextStyle::from((FONT, cell_font).into_font())
                .color(&colour)
                .pos(Pos::new(HPos::Center, VPos::Center));
            chart.draw_series(std::iter::once(Text::new(label, (x, y), style)))?;
        }
    }

    // Colour scale: 0 % (bottom) to 100 % (top).
    let mut legend = ChartBuilder::on(&scale)
        .margin_top(62)
        .margin_bottom(90)
        .margin_right(20)
        .y_label_area_size(80)
        .build_cartesian_2d(0.0..1.0, 0.0..100.0)?;
    legend
        .configure_mesh()
        .disable_mesh()
        .disable_x_axis()
        .y_labels(6)
        .y_label_formatter(&|v| num_tick(*v))
        .y_desc("accuracy (%)")
        .label_style((FONT, 16))
        .axis_desc_style((FONT, 18))
        .draw()?;
    legend.draw_series((0..100).map(|k| {
        let lo = k as f64;
        Rectangle::new([(0.0, lo), (1.0, lo + 1.0)], viridis(lo / 100.0).filled())
    }))?;
    Ok(())
}

fn draw_task_accuracy<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, r: &Report) -> Drawn<DB> {
    let m = r.accuracy_matrix.len().max(1);
    let n = r.accuracy_matrix.iter().map(Vec::len).max().unwrap_or(0);
    let row_name = |i: usize| {
        if r.joint {
            "joint".to_string()
        } else {
            format!("T{i}")
        }
    };
    // The legend gets its own column so that it never hides a point.
    let (w, _) = root.dim_in_pixel();
    let (plot, legend) = root.split_horizontally(w as i32 - 190);
    let x_fmt = |v: &f64| task_tick(*v, m, row_name);
    let mut chart = ChartBuilder::on(&plot)
        .caption("Accuracy of each task across the stream", (FONT, 26))
        .margin(20)
        .x_label_area_size(70)
        .y_label_area_size(80)
        .build_cartesian_2d(-0.3..m as f64 - 0.7, 0.0..105.0)?;
    chart
        .configure_mesh()
        .x_labels(m)
        .y_labels(11)
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&|v| num_tick(*v))
        .x_desc("after training task")
        .y_desc("test accuracy (%)")
        .label_style((FONT, 18))
        .axis_desc_style((FONT, 20))
        .light_line_style(WHITE.mix(0.0))
        .draw()?;

    let mut entries: Vec<(String, ShapeStyle)> = Vec::new();
    // Task j from the row where it was trained on (every row for a joint run).
    for j in 0..n {
        let colour = PALETTE[j % PALETTE.len()];
        let first = if r.joint { 0 } else { j };
        let pts: Vec<(f64, f64)> = r
            .accuracy_matrix
            .iter()
            .enumerate()
            .skip(first)
            .filter_map(|(i, row)| row.get(j).copied().flatten().map(|a| (i as f64, a * 100.0)))
            .collect();
        let style = colour.stroke_width(2);
        chart.draw_series(LineSeries::new(pts.clone(), style))?;
        chart.draw_series(pts.iter().map(|p| Circle::new(*p, 4, colour.filled())))?;
        entries.push((format!("T{j}"), style));
    }
    // Mean over the tasks trained so far (ACC of the prefix; the last point is ACC).
    let mean: Vec<(f64, f64)> = r
        .accuracy_matrix
        .iter()
        .enumerate()
        .filter_map(|(i, row)| {
            let seen = if r.joint { row.len() } else { i + 1 };
            let v: Vec<f64> = row.iter().take(seen).flatten().copied().collect();
            (!v.is_empty()).then(|| (i as f64, 100.0 * v.iter().sum::<f64>() / v.len() as f64))
        })
        .collect();
    let black = BLACK.stroke_width(3);
    chart.draw_series(LineSeries::new(mean.clone(), black))?;
    chart.draw_series(mean.iter().map(|p| Circle::new(*p, 3, BLACK.filled())))?;
    entries.push(("mean of tasks seen".into(), black));
    draw_legend(&legend, "task", &entries)
}

/// A legend in its own area: a title, then a line sample and a label per entry.
fn draw_legend<DB: DrawingBackend>(
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

fn draw_memory<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, r: &Report) -> Drawn<DB> {
    let mem = &r.memory;
    let source = if mem.source.is_empty() {
        "unknown source"
    } else {
        mem.source.as_str()
    };
    let titled = root.titled(&format!("Peak memory ({source}), MiB"), (FONT, 26))?;
    let (left, right) = titled.split_horizontally(titled.dim_in_pixel().0 as i32 / 2);
    let phases: Vec<(String, f64)> = vec![
        ("train".into(), mem.train.peak_bytes as f64 / MIB),
        ("eval".into(), mem.eval.peak_bytes as f64 / MIB),
        ("after task".into(), mem.after_task.peak_bytes as f64 / MIB),
        ("run peak".into(), mem.peak_bytes as f64 / MIB),
        ("run end".into(), mem.end_bytes as f64 / MIB),
    ];
    let tasks: Vec<(String, f64)> = mem
        .per_task_train_peak_bytes
        .iter()
        .enumerate()
        .map(|(k, b)| (format!("T{k}"), *b as f64 / MIB))
        .collect();
    let top = phases
        .iter()
        .chain(&tasks)
        .map(|(_, v)| *v)
        .fold(0.0, f64::max);
    let top = if top > 0.0 { top * 1.15 } else { 1.0 };
    bars(
        &left,
        &phases,
        "phase",
        "peak memory (MiB)",
        top,
        PALETTE[0],
    )?;
    bars(
        &right,
        &tasks,
        "training task",
        "train-phase peak (MiB)",
        top,
        PALETTE[1],
    )?;
    Ok(())
}

/// ACC and retention of each row as horizontal bars (fractions), whiskers at ± sd.
fn draw_rows<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, rows: &[RunRow]) -> Drawn<DB> {
    let titled = root.titled("ACC and retention (mean ± sd over seeds)", (FONT, 26))?;
    let (left, right) = titled.split_horizontally(titled.dim_in_pixel().0 as i32 * 62 / 100);
    let label_px = rows
        .iter()
        .map(|r| r.name.chars().count())
        .max()
        .unwrap_or(4)
        .clamp(4, 60) as u32
        * 7
        + 10;
    for (area, title, pick, colour, labels) in [
        (
            &left,
            "ACC",
            (|r: &RunRow| r.acc) as fn(&RunRow) -> Option<Stat>,
            PALETTE[0],
            true,
        ),
        (
            &right,
            "retention",
            |r: &RunRow| r.retention,
            PALETTE[1],
            false,
        ),
    ] {
        let k = rows.len().max(1);
        let top = rows
            .iter()
            .filter_map(|r| pick(r).map(|s| s.mean + s.std.unwrap_or(0.0)))
            .fold(1.0, f64::max)
            * 1.12;
        let names = |v: &f64| {
            let i = v.round();
            if (v - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < rows.len() {
                let n = &rows[rows.len() - 1 - i as usize].name;
                if n.chars().count() > 60 {
                    format!(
                        "…{}",
                        n.chars()
                            .rev()
                            .take(59)
                            .collect::<Vec<_>>()
                            .into_iter()
                            .rev()
                            .collect::<String>()
                    )
                } else {
                    n.clone()
                }
            } else {
                String::new()
            }
        };
        let mut chart = ChartBuilder::on(area)
            .margin(15)
            .x_label_area_size(50)
            .y_label_area_size(if labels { label_px } else { 10 })
            .build_cartesian_2d(0.0..top, -0.5..k as f64 - 0.5)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(if labels { k } else { 0 })
            .y_label_formatter(&names)
            .x_label_formatter(&|v| num_tick(*v))
            .x_desc(title)
            .label_style((FONT, 13))
            .axis_desc_style((FONT, 18))
            .light_line_style(WHITE.mix(0.0))
            .draw()?;
        let at = |i: usize| (rows.len() - 1 - i) as f64;
        chart.draw_series(rows.iter().enumerate().filter_map(|(i, r)| {
            let s = pick(r)?;
            Some(Rectangle::new(
                [(0.0, at(i) - 0.35), (s.mean, at(i) + 0.35)],
                colour.filled(),
            ))
        }))?;
        chart.draw_series(rows.iter().enumerate().filter_map(|(i, r)| {
            let s = pick(r)?;
            let sd = s.std?;
            Some(PathElement::new(
                vec![(s.mean - sd, at(i)), (s.mean + sd, at(i))],
                BLACK.stroke_width(2),
            ))
        }))?;
        let style = TextStyle::from((FONT, 13).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
        chart.draw_series(rows.iter().enumerate().filter_map(|(i, r)| {
            let s = pick(r)?;
            Some(Text::new(
                format!(" {:.3}", s.mean),
                (s.mean + s.std.unwrap_or(0.0), at(i)),
                style.clone(),
            ))
        }))?;
    }
    Ok(())
}

/// A bar chart of `(label, value)` with each value written above its bar.
fn bars<DB: DrawingBackend>(
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
        .x_labels(k)
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
    let style = TextStyle::from((FONT, 15).into_font()).pos(Pos::new(HPos::Center, VPos::Bottom));
    chart.draw_series(
        items
            .iter()
            .enumerate()
            .map(|(i, (_, v))| Text::new(format!("{v:.1}"), (i as f64, *v), style.clone())),
    )?;
    Ok(())
}

fn draw_loss_lr<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    steps: &[StepLog],
    r: &Report,
) -> Drawn<DB> {
    let titled = root.margin(8, 0, 0, 0).titled(
        "Training loss and learning rate per logged step",
        (FONT, 26),
    )?;
    let (_, h) = titled.dim_in_pixel();
    let (upper, lower) = titled.split_vertically(h as i32 * 3 / 5);
    let x_max = steps.iter().map(|s| s.global_step).max().unwrap_or(0) as f64 + 1.0;
    // Where each task after the first starts: its first logged row's global step minus its
    // step within the task.
    let mut boundaries = Vec::new();
    for w in steps.windows(2) {
        if w[1].task != w[0].task {
            let start = w[1].global_step.saturating_sub(w[1].step);
            boundaries.push((w[1].task, start as f64));
        }
    }
    let loss: Vec<(f64, f64)> = steps
        .iter()
        .filter(|s| s.loss.is_finite())
        .map(|s| (s.global_step as f64, s.loss))
        .collect();
    let lr: Vec<(f64, f64)> = steps
        .iter()
        .filter(|s| s.lr.is_finite())
        .map(|s| (s.global_step as f64, s.lr))
        .collect();
    let top = |v: &[(f64, f64)]| {
        let m = v.iter().map(|p| p.1).fold(0.0, f64::max);
        // Headroom for the legend in the upper right corner.
        if m > 0.0 { m * 1.3 } else { 1.0 }
    };
    let lr_name = r
        .config
        .pointer("/optimizer/type")
        .and_then(|v| v.as_str())
        .map_or_else(
            || "learning rate".to_string(),
            |o| format!("learning rate ({o})"),
        );

    for (area, series, y_desc, label, colour) in [
        (
            &upper,
            &loss,
            "loss",
            "training loss (window mean)",
            PALETTE[0],
        ),
        (&lower, &lr, "learning rate", lr_name.as_str(), PALETTE[3]),
    ] {
        let y_top = top(series);
        let mut chart = ChartBuilder::on(area)
            .margin(15)
            .x_label_area_size(55)
            .y_label_area_size(90)
            .build_cartesian_2d(0.0..x_max, 0.0..y_top)?;
        chart
            .configure_mesh()
            .x_labels(10)
            .y_labels(6)
            .x_label_formatter(&|v| {
                if v.fract() == 0.0 {
                    format!("{v:.0}")
                } else {
                    String::new()
                }
            })
            .y_label_formatter(&|v| num_tick(*v))
            .x_desc("global step")
            .y_desc(y_desc)
            .label_style((FONT, 16))
            .axis_desc_style((FONT, 18))
            .light_line_style(WHITE.mix(0.0))
            .draw()?;
        let grey = RGBColor(160, 160, 160);
        for (task, x) in &boundaries {
            chart.draw_series(LineSeries::new(vec![(*x, 0.0), (*x, y_top)], grey))?;
            let style = TextStyle::from((FONT, 14).into_font())
                .color(&grey)
                .pos(Pos::new(HPos::Left, VPos::Top));
            chart.draw_series(std::iter::once(Text::new(
                format!(" T{task}"),
                (*x, y_top),
                style,
            )))?;
        }
        let style = colour.stroke_width(2);
        chart
            .draw_series(LineSeries::new(series.clone(), style))?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .label_font((FONT, 16))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;
    }
    Ok(())
}

/// A figure's mean and, over several seeds, its sample standard deviation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stat {
    /// The value, or the mean over seeds.
    pub mean: f64,
    /// Standard deviation over seeds; `None` for a single run.
    pub std: Option<f64>,
}

impl Stat {
    /// Mean ± sample standard deviation of `values` (`None` when empty; no deviation for one
    /// value, which has none).
    pub fn of(values: &[f64]) -> Option<Self> {
        engram_core::train::metrics::mean_std(values).map(|(mean, std)| Self {
            mean,
            std: (values.len() > 1).then_some(std),
        })
    }

    /// Reads `{"mean": m, "std": s}` (the form of `aggregate.json` and `sweep.json`; `std` may
    /// be `null`); `None` for anything else.
    pub fn from_aggregate(v: &serde_json::Value) -> Option<Self> {
        Some(Self {
            mean: v.get("mean")?.as_f64()?,
            std: v.get("std").and_then(serde_json::Value::as_f64),
        })
    }

    /// `0.1992`, or `0.1992 ± 0.0010` with a standard deviation; `digits` decimals.
    pub fn format(&self, digits: usize) -> String {
        match self.std {
            Some(sd) => format!("{:.*} ± {:.*}", digits, self.mean, digits, sd),
            None => format!("{:.*}", digits, self.mean),
        }
    }
}

/// One row of `engram compare`: a run directory's headline figures.
#[derive(Clone, Debug, PartialEq)]
pub struct RunRow {
    /// The directory as given on the command line.
    pub name: String,
    /// Number of seeds (1 for a single run).
    pub seeds: usize,
    /// Average accuracy after the last task (fraction).
    pub acc: Option<Stat>,
    /// Backward transfer (fraction; negative = forgetting).
    pub bwt: Option<Stat>,
    /// Average forgetting (fraction; positive = forgetting).
    pub forgetting: Option<Stat>,
    /// Forward transfer (fraction).
    pub fwt: Option<Stat>,
    /// Share of old-task accuracy kept (fraction).
    pub retention: Option<Stat>,
    /// ACC of the task-IL view (class-incremental runs; fraction).
    pub task_il_acc: Option<Stat>,
    /// Wall-clock time of the whole run, seconds.
    pub total_s: Option<Stat>,
    /// Peak memory of the run, MiB (heap on the CPU, device pool on GPUs).
    pub peak_mib: Option<Stat>,
    /// The final model's parameters, thousands.
    pub params_k: Option<Stat>,
    /// What the figures were measured on ([`benchmark`]; the first seed's for a `--seeds`
    /// directory).
    pub data: serde_json::Value,
    /// Accuracy on each task right after training on it, `[tasks]`, mean over seeds
    /// ([`learned`]); `None` when no report has a full diagonal.
    pub learned: Option<Vec<f64>>,
    /// Whether the run is naive fine-tuning: no `[[forgetting]]` strategy but `naive`, not
    /// joint.
    pub naive: bool,
}

/// Accuracy on each task `t` right after training on it, `[tasks]`: the task-IL view's
/// diagonal for class-incremental runs (logits restricted to `t`'s classes, which does not
/// reward a head biased to the newest classes), the accuracy matrix's otherwise. `None` when a
/// cell is missing (a failed run).
pub fn learned(r: &Report) -> Option<Vec<f64>> {
    learned_of(
        &r.accuracy_matrix,
        r.task_il_accuracy_matrix.as_ref(),
        r.tasks.len(),
    )
}

/// [`learned`] from the matrices themselves (`[tasks][tasks]`, as `report.json` and
/// `sweep.json` hold them): the diagonal of `task_il` where given, else of `accuracy`, over
/// `tasks` tasks; `None` when a cell is missing.
pub fn learned_of(
    accuracy: &engram_core::train::metrics::Matrix,
    task_il: Option<&engram_core::train::metrics::Matrix>,
    tasks: usize,
) -> Option<Vec<f64>> {
    let m = task_il.unwrap_or(accuracy);
    (0..tasks)
        .map(|t| m.get(t).and_then(|row| row.get(t).copied().flatten()))
        .collect()
}

/// How far below naive fine-tuning a new task may be learned, right after training on it
/// ([`learned`]), before [`plasticity_warnings`] says so: 0.05 (the suite's goal).
pub const PLASTICITY_GAP: f64 = 0.05;

/// A warning for each task that a run learned more than [`PLASTICITY_GAP`] below a naive run
/// on the same data ([`RunRow::naive`], same [`benchmark`]): the strategies kept the new task
/// from being learned (too strong a penalty, too much replay, a projection that cancels the
/// new gradient). Empty without a naive run to compare with.
pub fn plasticity_warnings(rows: &[RunRow]) -> Vec<String> {
    let mut out = Vec::new();
    for base in rows.iter().filter(|r| r.naive) {
        let Some(naive) = &base.learned else { continue };
        for r in rows.iter().filter(|r| !r.naive && r.data == base.data) {
            let Some(mine) = &r.learned else { continue };
            for (t, (m, b)) in mine.iter().zip(naive).enumerate() {
                if b - m > PLASTICITY_GAP {
                    out.push(format!(
                        "warning: {}: task {t} reached {m:.3} right after training on it, naive fine-tuning ({}) {b:.3}: its strategies kept the new task from being learned (the book's troubleshooting chapter, \"A new task is learned far below naive\")",
                        r.name, base.name
                    ));
                }
            }
        }
    }
    out
}

impl RunRow {
    /// The figures of `reports` (one per seed) as one row named `name`: each metric's mean ±
    /// sample sd over the reports that define it; time in seconds, peak memory in MiB,
    /// parameters in thousands, [`learned`] averaged per task.
    pub fn of_reports(name: &str, reports: &[Report]) -> Self {
        let of = |f: &dyn Fn(&Report) -> Option<f64>| {
            let v: Vec<f64> = reports.iter().filter_map(f).collect();
            Stat::of(&v)
        };
        let diagonals: Option<Vec<Vec<f64>>> = reports.iter().map(learned).collect();
        let learned = diagonals.filter(|d| !d.is_empty()).map(|d| {
            (0..d[0].len())
                .map(|t| d.iter().map(|row| row[t]).sum::<f64>() / d.len() as f64)
                .collect()
        });
        RunRow {
            name: name.to_string(),
            seeds: reports.len(),
            acc: of(&|r| r.metrics.acc),
            bwt: of(&|r| r.metrics.bwt),
            forgetting: of(&|r| r.metrics.forgetting),
            fwt: of(&|r| r.metrics.fwt),
            retention: of(&|r| r.metrics.retention),
            task_il_acc: of(&|r| r.task_il_metrics.as_ref().and_then(|m| m.acc)),
            total_s: of(&|r| Some(r.timings.total_s)),
            peak_mib: of(&|r| Some(r.memory.peak_bytes as f64 / MIB)),
            params_k: of(&|r| Some(r.memory.parameters as f64 / 1e3)),
            data: reports.first().map_or(serde_json::Value::Null, benchmark),
            learned,
            naive: !reports.is_empty()
                && reports.iter().all(|r| {
                    !r.joint
                        && r.config["forgetting"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .all(|f| f["type"] == "naive")
                }),
        }
    }
}

/// Reads the headline figures of a run directory: `dir/report.json` for a single run, else
/// `dir/aggregate.json` (written by `engram run --seeds`) for mean ± standard deviation, with
/// time and peak memory averaged over the `seed-N/report.json` files it lists.
///
/// # Errors
/// [`Error::ConfigFile`] when `dir` holds neither file or one is malformed (see
/// [`load_report`]); [`Error::Io`] when a file cannot be read.
pub fn run_row(dir: &Path) -> Result<RunRow> {
    let name = dir.display().to_string();
    let agg_path = dir.join("aggregate.json");
    if !dir.join("report.json").is_file() && agg_path.is_file() {
        let bytes =
            engram_core::fsutil::read_bounded(&agg_path, engram_core::fsutil::MAX_TEXT_BYTES)
                .map_err(|e| Error::io(&agg_path, e))?;
        let agg: serde_json::Value =
            serde_json::from_slice(&bytes).map_err(|e| Error::ConfigFile {
                file: agg_path.clone(),
                message: format!("not valid JSON: {e}"),
                hint: None,
            })?;
        let reports = agg["runs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str())
            .map(|s| load_report(&dir.join(s)))
            .collect::<Result<Vec<_>>>()?;
        let mut row = RunRow::of_reports(&name, &reports);
        row.seeds = agg["seeds"]
            .as_array()
            .map_or(reports.len(), |a| a.len())
            .max(reports.len());
        return Ok(row);
    }
    let r = load_report(dir)?;
    let name = match &r.failure {
        Some(f) => format!(
            "{name} (failed at task {}, step {})",
            f.task, f.step_in_task
        ),
        None => name,
    };
    Ok(RunRow::of_reports(&name, std::slice::from_ref(&r)))
}

/// What a run's figures were measured on, as the run itself saw it (defaults resolved): the
/// data set (`data.dataset`), the `scenario`, the evaluation split (`data.evaluate_on`) and
/// the task split (`tasks`: the count, each task's classes and the training and evaluation
/// samples in all). Two runs with the same values were scored on the same task sequence.
pub fn benchmark(r: &Report) -> serde_json::Value {
    let classes: Vec<String> = r
        .tasks
        .iter()
        .map(|t| {
            t.classes
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    let train: usize = r.tasks.iter().map(|t| t.train_samples).sum();
    let eval: usize = r.tasks.iter().map(|t| t.eval_samples).sum();
    serde_json::json!({
        "data.dataset": r.config["data"]["dataset"],
        "scenario": r.scenario,
        "data.evaluate_on": r.config["data"]["evaluate_on"],
        "tasks": format!(
            "{} tasks (classes {}), {train} training and {eval} evaluation samples",
            r.tasks.len(),
            classes.join(" | ")
        ),
    })
}

/// The [`benchmark`] entries on which `rows` differ, each as `key: value per run` — figures
/// measured on another data set, scenario, evaluation split or task split are not comparable.
/// Empty when the runs agree.
pub fn data_differences(rows: &[RunRow]) -> Vec<String> {
    let mut keys: Vec<&String> = rows
        .iter()
        .filter_map(|r| r.data.as_object())
        .flat_map(|o| o.keys())
        .collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| {
            rows.iter()
                .any(|r| r.data.get(k.as_str()) != rows[0].data.get(k.as_str()))
        })
        .map(|k| {
            let values: Vec<String> = rows
                .iter()
                .map(|r| {
                    let v = r.data.get(k.as_str()).unwrap_or(&serde_json::Value::Null);
                    format!("{} {v}", r.name)
                })
                .collect();
            format!("{k}: {}", values.join(", "))
        })
        .collect()
}

/// The `engram compare` table: a header and one row per run, columns aligned.
///
/// Columns: `run`, `seeds`, `ACC`, `BWT`, `forgetting`, `FWT`, `retention`, `task-IL ACC` (4
/// decimals, fractions; the last for class-incremental runs), `time (s)` (1 decimal), `peak MiB` (1 decimal), `params k` (the final model's
/// parameters in thousands, 1 decimal); `–` where undefined.
pub fn compare_table(rows: &[RunRow]) -> String {
    let header = [
        "run",
        "seeds",
        "ACC",
        "BWT",
        "forgetting",
        "FWT",
        "retention",
        "task-IL ACC",
        "time (s)",
        "peak MiB",
        "params k",
    ];
    let cell = |s: &Option<Stat>, d: usize| s.map_or_else(|| "–".to_string(), |s| s.format(d));
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.name.clone(),
                r.seeds.to_string(),
                cell(&r.acc, 4),
                cell(&r.bwt, 4),
                cell(&r.forgetting, 4),
                cell(&r.fwt, 4),
                cell(&r.retention, 4),
                cell(&r.task_il_acc, 4),
                cell(&r.total_s, 1),
                cell(&r.peak_mib, 1),
                cell(&r.params_k, 1),
            ]
        })
        .collect();
    let width = |c: usize| {
        body.iter()
            .map(|r| r[c].chars().count())
            .chain(std::iter::once(header[c].chars().count()))
            .max()
            .unwrap_or(0)
    };
    let widths: Vec<usize> = (0..header.len()).map(width).collect();
    let mut s = String::new();
    let mut line = |cells: Vec<&str>| {
        let mut l = String::new();
        for (c, text) in cells.iter().enumerate() {
            let pad = widths[c].saturating_sub(text.chars().count());
            if c == 0 {
                l.push_str(text);
                l.push_str(&" ".repeat(pad));
            } else {
                l.push_str("  ");
                l.push_str(&" ".repeat(pad));
                l.push_str(text);
            }
        }
        let _ = writeln!(s, "{}", l.trim_end());
    };
    line(header.to_vec());
    for r in &body {
        line(r.iter().map(String::as_str).collect());
    }
    s
}

/// `engram compare DIR...`: [`run_row`] for each directory, then [`compare_table`], a
/// warning line for each `[data]` key on which the runs differ ([`data_differences`]): a
/// validation figure next to a test figure, or runs on other task splits, would look
/// comparable in the table and are not; and, with a naive run among them, a warning for each
/// task another run learned far below it ([`plasticity_warnings`]). Returns the table and the warnings (the CLI prints
/// them on standard error).
///
/// # Errors
/// The first error of [`run_row`].
pub fn compare(dirs: &[PathBuf]) -> Result<(String, Vec<String>)> {
    let rows = dirs
        .iter()
        .map(|d| run_row(d))
        .collect::<Result<Vec<_>>>()?;
    let diff = data_differences(&rows);
    let mut warnings = if diff.is_empty() {
        Vec::new()
    } else {
        std::iter::once(
            "warning: these runs were measured on different data; their figures are not comparable:"
                .to_string(),
        )
        .chain(diff.into_iter().map(|d| format!("  {d}")))
        .collect()
    };
    warnings.extend(plasticity_warnings(&rows));
    Ok((compare_table(&rows), warnings))
}

/// The reference page of the book (`book/src/reference.md`), generated from `registry`:
/// for each kind, each component's name, summary and a TOML entry listing every key with its
/// default value. Keys whose default is unset (an `Option` that is `None`) have no TOML value
/// and are not listed; the built-ins chapter describes them.
pub fn reference_markdown(registry: &Registry) -> String {
    let mut s = String::from(
        "# Reference: strategies, models and datasets\n\n\
         <!-- Generated from the strategy registry by the `reference_md_matches_registry` test\n     \
         (tests/engram/book.rs). Do not edit by hand: run\n     \
         `UPDATE_GOLDEN=1 cargo test --release --test engram book::` to regenerate it. -->\n\n\
         Every registered built-in component with every key it accepts and its default value, as\n\
         `engram list` prints them. Copy the keys you want to change into an experiment file; a\n\
         key left out keeps its default, and an unknown key is an error that names the nearest\n\
         valid one. Keys whose default is *unset* (for example `replay`'s `every`) are not shown\n\
         here, and some keys only apply in one mode (for example `replay`'s `weight` with\n\
         `every`): see [the built-ins](built-ins.md).\n",
    );
    let mut kind = None;
    for e in registry.entries() {
        let reg = &e.registration;
        let k = reg.factory.kind();
        if kind != Some(k) {
            let title = match k {
                Kind::Forgetting => "Forgetting strategies: `[[forgetting]]`",
                Kind::Memory => "Memory strategies: `[[memory]]`",
                Kind::Scheduler => "Schedulers: `[[scheduler]]`",
                Kind::Model => "Models: `[model]`",
                Kind::Dataset => "Datasets: `[data] dataset`",
                Kind::Format => "Data formats: `[data] format` with `path`",
            };
            let _ = write!(s, "\n## {title}\n");
            kind = Some(k);
        }
        let mut summary = reg.summary.chars();
        let summary: String = summary
            .next()
            .map(|c| c.to_uppercase().chain(summary).collect())
            .unwrap_or_default();
        let header = match k {
            Kind::Model => format!("[model]\ntype = \"{}\"", reg.name),
            Kind::Dataset => format!("[data]\ndataset = \"{}\"", reg.name),
            Kind::Format => format!("[data]\nformat = \"{}\"\npath = \"DIR\"", reg.name),
            _ => format!("[[{}]]\ntype = \"{}\"", k.list(), reg.name),
        };
        let _ = write!(
            s,
            "\n### `{}`\n\n{summary}.\n\n```toml\n{header}\n",
            reg.name
        );
        let defaults = (reg.defaults)();
        for (key, value) in &defaults {
            let _ = writeln!(s, "{key} = {value}");
        }
        s.push_str("```\n");
        if defaults.is_empty() {
            s.push_str("\nIt takes no parameters.\n");
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn viridis_ends_and_clamps() {
        assert_eq!(viridis(0.0), RGBColor(68, 1, 84));
        assert_eq!(viridis(1.0), RGBColor(253, 231, 37));
        assert_eq!(viridis(2.0), viridis(1.0));
        assert_eq!(viridis(f64::NAN), viridis(0.0));
    }

    #[test]
    fn ticks() {
        assert_eq!(task_tick(2.0, 3, |k| format!("T{k}")), "T2");
        assert_eq!(task_tick(2.5, 3, |k| format!("T{k}")), "");
        assert_eq!(task_tick(3.0, 3, |k| format!("T{k}")), "");
        assert_eq!(num_tick(0.05), "0.05");
        assert_eq!(num_tick(350.0), "350");
        assert_eq!(num_tick(0.0), "0");
        assert_eq!(num_tick(1e-4), "1.0e-4");
    }

    #[test]
    fn steps_csv_errors_name_the_line() {
        let p = Path::new("steps.csv");
        let ok = parse_steps_csv(
            "task,epoch,step,global_step,loss,lr,samples\n0,0,9,9,NaN,0.05,1280\n",
            p,
        )
        .unwrap();
        assert_eq!(ok.len(), 1);
        assert!(ok[0].loss.is_nan());
        let e = parse_steps_csv("task,epoch,step,global_step,loss,lr\n", p).unwrap_err();
        assert!(e.to_string().contains("no `samples` column"), "{e}");
        let e = parse_steps_csv(
            "task,epoch,step,global_step,loss,lr,samples\n0,0,9,x,1,0.05,1\n",
            p,
        )
        .unwrap_err();
        assert!(e.to_string().contains("line 2: `global_step` = `x`"), "{e}");
        assert_eq!(e.exit_code(), 2);
    }

    #[test]
    fn stat_format() {
        let s = Stat {
            mean: 0.25,
            std: Some(0.01),
        };
        assert_eq!(s.format(4), "0.2500 ± 0.0100");
        assert_eq!(Stat::of(&[1.0]).unwrap().format(1), "1.0");
    }
}
