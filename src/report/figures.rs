//! The figures of [`super::plot`], one function each, drawn on any plotters backend. Each
//! stays bounded in what it draws however long the stream ([`MAX_MATRIX_CELLS`],
//! [`MAX_CURVES`], [`MAX_BARS`], [`MAX_LABELS`]).

use super::MIB;
use super::compare::{RunRow, Stat};
use super::plot::{
    Drawn, FONT, MAX_BARS, MAX_CURVES, MAX_LABELS, MAX_MATRIX_CELLS, PALETTE, bars, draw_legend,
    num_tick, spread, task_tick, viridis,
};
use engram_core::train::report::{Report, StepLog};
use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// A chart with an `f64` axis each way.
type Chart<'a, DB> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// Heatmaps with at most this many cells a side have each cell's accuracy written in it.
const ANNOTATED_CELLS: usize = 40;

/// `T{i}` for row `i` of a report's matrix, `joint` for a joint run's single row.
fn row_name(r: &Report, i: usize) -> String {
    if r.joint {
        "joint".to_string()
    } else {
        format!("T{i}")
    }
}

/// The accuracy matrix as a heatmap with a colour scale; blocks of `b`×`b` tasks averaged when
/// a side is longer than [`MAX_MATRIX_CELLS`] (the caption says so).
pub(super) fn draw_matrix<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    r: &Report,
) -> Drawn<DB> {
    let n = r
        .accuracy_matrix
        .iter()
        .map(Vec::len)
        .max()
        .unwrap_or(0)
        .max(1);
    let rows = r.accuracy_matrix.len().max(1);
    let (w, _) = root.dim_in_pixel();
    let (main, scale) = root.split_horizontally(w as i32 - 150);
    let b = n.max(rows).div_ceil(MAX_MATRIX_CELLS).max(1);
    let caption = if b == 1 {
        "Accuracy matrix R[i][j] (% test accuracy)".to_string()
    } else {
        format!("Accuracy matrix R[i][j] (%), means of {b}×{b} task blocks")
    };
    // Row i is drawn at y = rows - 1 - i so that row 0 is at the top, as in the printed matrix.
    let x_fmt = |v: &f64| task_tick(*v, n, |k| format!("T{k}"));
    let y_fmt = |v: &f64| task_tick(*v, rows, |k| row_name(r, rows - 1 - k));
    let mut chart = ChartBuilder::on(&main)
        .caption(caption, (FONT, 26))
        .margin(20)
        .x_label_area_size(70)
        .y_label_area_size(110)
        .build_cartesian_2d(-0.5..n as f64 - 0.5, -0.5..rows as f64 - 0.5)?;
    chart
        .configure_mesh()
        .disable_mesh()
        .x_labels(n.min(MAX_LABELS))
        .y_labels(rows.min(MAX_LABELS))
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .x_desc("evaluated task")
        .y_desc("after training task")
        .label_style((FONT, 18))
        .axis_desc_style((FONT, 20))
        .draw()?;
    draw_cells(&mut chart, &r.accuracy_matrix, n, rows, b)?;
    draw_colour_scale(&scale)
}

/// The mean of the defined cells of rows `i0..i1`, columns `j0..j1`; `None` when none is.
fn block_mean(
    m: &[Vec<Option<f64>>],
    (i0, i1): (usize, usize),
    (j0, j1): (usize, usize),
) -> Option<f64> {
    let (sum, count) = m[i0..i1]
        .iter()
        .flat_map(|row| row.iter().take(j1).skip(j0).flatten())
        .fold((0.0, 0usize), |(s, c), v| (s + v, c + 1));
    (count > 0).then(|| sum / count as f64)
}

/// The heatmap's cells: blocks of `b`×`b` tasks (one task each when `b` is 1), coloured by
/// accuracy, outlined in white, and annotated when there are few enough to read.
fn draw_cells<DB: DrawingBackend>(
    chart: &mut Chart<'_, DB>,
    m: &[Vec<Option<f64>>],
    n: usize,
    rows: usize,
    b: usize,
) -> Drawn<DB> {
    let annotate = n.div_ceil(b) <= ANNOTATED_CELLS && rows.div_ceil(b) <= ANNOTATED_CELLS;
    let cell_font = if n <= 8 { 20 } else { 14 };
    for i0 in (0..m.len()).step_by(b) {
        let i1 = (i0 + b).min(m.len());
        let (y0, y1) = ((rows - i1) as f64 - 0.5, (rows - i0) as f64 - 0.5);
        for j0 in (0..n).step_by(b) {
            let j1 = (j0 + b).min(n);
            let (x0, x1) = (j0 as f64 - 0.5, j1 as f64 - 0.5);
            let cell = block_mean(m, (i0, i1), (j0, j1));
            let fill = cell.map_or(RGBColor(220, 220, 220), viridis);
            chart.draw_series(std::iter::once(Rectangle::new(
                [(x0, y0), (x1, y1)],
                fill.filled(),
            )))?;
            chart.draw_series(std::iter::once(Rectangle::new(
                [(x0, y0), (x1, y1)],
                WHITE.stroke_width(1),
            )))?;
            if !annotate {
                continue;
            }
            let (label, colour) = match cell {
                Some(a) if a < 0.6 => (format!("{:.1}", a * 100.0), WHITE),
                Some(a) => (format!("{:.1}", a * 100.0), BLACK),
                None => ("–".to_string(), BLACK),
            };
            let style = TextStyle::from((FONT, cell_font).into_font())
                .color(&colour)
                .pos(Pos::new(HPos::Center, VPos::Center));
            let at = ((x0 + x1) / 2.0, (y0 + y1) / 2.0);
            chart.draw_series(std::iter::once(Text::new(label, at, style)))?;
        }
    }
    Ok(())
}

/// The heatmap's colour scale: 0 % (bottom) to 100 % (top).
fn draw_colour_scale<DB: DrawingBackend>(scale: &DrawingArea<DB, Shift>) -> Drawn<DB> {
    let mut legend = ChartBuilder::on(scale)
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

/// Each task's accuracy after each training task (at most [`MAX_CURVES`] tasks, evenly
/// spaced; the legend's title says how many of how many) and the mean over the tasks seen.
pub(super) fn draw_task_accuracy<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    r: &Report,
) -> Drawn<DB> {
    let m = r.accuracy_matrix.len().max(1);
    let n = r.accuracy_matrix.iter().map(Vec::len).max().unwrap_or(0);
    // The legend gets its own column so that it never hides a point.
    let (w, _) = root.dim_in_pixel();
    let (plot, legend) = root.split_horizontally(w as i32 - 190);
    let x_fmt = |v: &f64| task_tick(*v, m, |i| row_name(r, i));
    let mut chart = ChartBuilder::on(&plot)
        .caption("Accuracy of each task across the stream", (FONT, 26))
        .margin(20)
        .x_label_area_size(70)
        .y_label_area_size(80)
        .build_cartesian_2d(-0.3..m as f64 - 0.7, 0.0..105.0)?;
    chart
        .configure_mesh()
        .x_labels(m.min(MAX_LABELS))
        .y_labels(11)
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&|v| num_tick(*v))
        .x_desc("after training task")
        .y_desc("test accuracy (%)")
        .label_style((FONT, 18))
        .axis_desc_style((FONT, 20))
        .light_line_style(WHITE.mix(0.0))
        .draw()?;
    // Points are marked while they stay apart.
    let marks = m <= 100;
    let mut entries: Vec<(String, ShapeStyle)> = Vec::new();
    // Task j from the row where it was trained on (every row for a joint run).
    for (k, j) in spread(n, MAX_CURVES).into_iter().enumerate() {
        let colour = PALETTE[k % PALETTE.len()];
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
        if marks {
            chart.draw_series(pts.iter().map(|p| Circle::new(*p, 4, colour.filled())))?;
        }
        entries.push((format!("T{j}"), style));
    }
    let mean = seen_mean(r);
    let black = BLACK.stroke_width(3);
    chart.draw_series(LineSeries::new(mean.clone(), black))?;
    if marks {
        chart.draw_series(mean.iter().map(|p| Circle::new(*p, 3, BLACK.filled())))?;
    }
    entries.push(("mean of tasks seen".into(), black));
    let title = if n > MAX_CURVES {
        format!("task ({MAX_CURVES} of {n})")
    } else {
        "task".to_string()
    };
    draw_legend(&legend, &title, &entries)
}

/// The mean accuracy over the tasks trained so far after each training task, in % (ACC of
/// the prefix; the last point is ACC), as `(row, mean)` points.
fn seen_mean(r: &Report) -> Vec<(f64, f64)> {
    r.accuracy_matrix
        .iter()
        .enumerate()
        .filter_map(|(i, row)| {
            let seen = if r.joint { row.len() } else { i + 1 };
            let v: Vec<f64> = row.iter().take(seen).flatten().copied().collect();
            (!v.is_empty()).then(|| (i as f64, 100.0 * v.iter().sum::<f64>() / v.len() as f64))
        })
        .collect()
}

/// Peak memory per phase and per task's training phase, MiB; with a report that has them
/// (`memory.per_task_step_peak_bytes`), a third panel on its own scale: each task's training
/// step's own peak (what a step adds above the bytes in use before it, which the process's
/// peak, dominated by the data set and strategy state, hides). Beyond [`MAX_BARS`] tasks, each
/// bar is the peak of a group of consecutive tasks (the axis says how many).
pub(super) fn draw_memory<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    r: &Report,
) -> Drawn<DB> {
    let mem = &r.memory;
    let source = if mem.source.is_empty() {
        "unknown source"
    } else {
        mem.source.as_str()
    };
    let titled = root.titled(&format!("Peak memory ({source}), MiB"), (FONT, 26))?;
    let steps = !mem.per_task_step_peak_bytes.is_empty();
    let width = titled.dim_in_pixel().0 as i32;
    let (left, right, step_area) = if steps {
        // The phases' five labels need the widest panel.
        let (left, rest) = titled.split_horizontally(width * 45 / 100);
        let (right, step_area) = rest.split_horizontally(width * 28 / 100);
        (left, right, Some(step_area))
    } else {
        let (left, right) = titled.split_horizontally(width / 2);
        (left, right, None)
    };
    let phases: Vec<(String, f64)> = vec![
        ("train".into(), mem.train.peak_bytes as f64 / MIB),
        ("eval".into(), mem.eval.peak_bytes as f64 / MIB),
        ("after task".into(), mem.after_task.peak_bytes as f64 / MIB),
        ("run peak".into(), mem.peak_bytes as f64 / MIB),
        ("run end".into(), mem.end_bytes as f64 / MIB),
    ];
    let (tasks, g) = task_groups(&mem.per_task_train_peak_bytes);
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
    let x_desc = if g == 1 {
        "training task".to_string()
    } else {
        format!("training tasks (peak of each {g})")
    };
    bars(
        &right,
        &tasks,
        &x_desc,
        "train-phase peak (MiB)",
        top,
        PALETTE[1],
    )?;
    if let Some(step_area) = step_area {
        let (step_bars, _) = task_groups(&mem.per_task_step_peak_bytes);
        let top = step_bars.iter().map(|(_, v)| *v).fold(0.0, f64::max);
        let top = if top > 0.0 { top * 1.15 } else { 1.0 };
        bars(
            &step_area,
            &step_bars,
            &x_desc,
            "training step peak (MiB)",
            top,
            PALETTE[2],
        )?;
    }
    Ok(())
}

/// Per-task byte figures as bars in MiB, labelled `T3` (or `T0–4` for a group), and the group
/// size: one task a bar up to [`MAX_BARS`] tasks, else the peak of each group of consecutive
/// tasks.
fn task_groups(per_task: &[u64]) -> (Vec<(String, f64)>, usize) {
    let g = per_task.len().div_ceil(MAX_BARS).max(1);
    let bars = per_task
        .chunks(g)
        .enumerate()
        .map(|(k, c)| {
            let peak = c.iter().copied().max().unwrap_or(0) as f64 / MIB;
            let (a, b) = (k * g, k * g + c.len() - 1);
            let label = if a == b {
                format!("T{a}")
            } else {
                format!("T{a}–{b}")
            };
            (label, peak)
        })
        .collect();
    (bars, g)
}

/// ACC and retention of each row as horizontal bars (fractions), whiskers at ± sd. When a row's
/// reports have a `retention_note` ([`RunRow::retention_caveat`]), its retention is written
/// with a `*` and the figure ends with [`RETENTION_CAVEAT`].
pub(super) fn draw_rows<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    rows: &[RunRow],
) -> Drawn<DB> {
    let titled = root.titled("ACC and retention (mean ± sd over seeds)", (FONT, 26))?;
    // Retention divides by each old task's diagonal: where one was at chance, the ratio is not
    // a share kept and can pass 1, as the report's note says; the figure says it too.
    let caveat = rows
        .iter()
        .any(|r| r.retention_caveat && r.retention.is_some());
    let body = if caveat {
        let h = titled.dim_in_pixel().1 as i32;
        let (body, foot) = titled.split_vertically(h - 28);
        let style = TextStyle::from((FONT, 14).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
        foot.draw(&Text::new(RETENTION_CAVEAT, (15, 12), style))?;
        body
    } else {
        titled
    };
    let (left, right) = body.split_horizontally(body.dim_in_pixel().0 as i32 * 62 / 100);
    let label_px = rows
        .iter()
        .map(|r| r.name.chars().count())
        .max()
        .unwrap_or(4)
        .clamp(4, 60) as u32
        * 7
        + 10;
    let acc = |r: &RunRow| r.acc;
    let retention = |r: &RunRow| r.retention;
    rows_panel(&left, rows, "ACC", &acc, PALETTE[0], Some(label_px), false)?;
    let title = if caveat { "retention *" } else { "retention" };
    rows_panel(&right, rows, title, &retention, PALETTE[1], None, caveat)
}

/// The footnote of the comparison figure when a row's retention is marked `*`.
pub(super) const RETENTION_CAVEAT: &str = "* an old task was at chance right after training: \
     retention divides by that accuracy, is not a share kept, can pass 1";

/// A run's name as a bar's label: at most 60 characters, the end kept (`…` before it).
fn row_label(name: &str) -> String {
    let len = name.chars().count();
    if len > 60 {
        format!("…{}", name.chars().skip(len - 59).collect::<String>())
    } else {
        name.to_string()
    }
}

/// One panel of [`draw_rows`]: the statistic `pick` of each row as a bar with its ± sd
/// whisker and its mean written after it (with a `*` for a row with
/// [`RunRow::retention_caveat`] when `mark_caveat`); the rows' names on the y axis when
/// `label_px` is given (the label area's width).
fn rows_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    rows: &[RunRow],
    title: &str,
    pick: &dyn Fn(&RunRow) -> Option<Stat>,
    colour: RGBColor,
    label_px: Option<u32>,
    mark_caveat: bool,
) -> Drawn<DB> {
    let k = rows.len().max(1);
    let top = rows
        .iter()
        .filter_map(|r| pick(r).map(|s| s.mean + s.std.unwrap_or(0.0)))
        .fold(1.0, f64::max)
        * 1.12;
    let names = |v: &f64| {
        let i = v.round();
        if (v - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < rows.len() {
            row_label(&rows[rows.len() - 1 - i as usize].name)
        } else {
            String::new()
        }
    };
    let mut chart = ChartBuilder::on(area)
        .margin(15)
        .x_label_area_size(50)
        .y_label_area_size(label_px.unwrap_or(10))
        .build_cartesian_2d(0.0..top, -0.5..k as f64 - 0.5)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(if label_px.is_some() { k } else { 0 })
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
        let star = if mark_caveat && r.retention_caveat {
            "*"
        } else {
            ""
        };
        Some(Text::new(
            format!(" {:.3}{star}", s.mean),
            (s.mean + s.std.unwrap_or(0.0), at(i)),
            style.clone(),
        ))
    }))?;
    Ok(())
}

/// Where each task after the first starts on the global-step axis: its first logged row's
/// global step minus its step within the task.
fn task_starts(steps: &[StepLog]) -> Vec<(usize, f64)> {
    steps
        .windows(2)
        .filter(|w| w[1].task != w[0].task)
        .map(|w| (w[1].task, w[1].global_step.saturating_sub(w[1].step) as f64))
        .collect()
}

/// Training loss (upper panel) and learning rate (lower panel) per logged step, with the
/// tasks' boundaries (at most [`MAX_MATRIX_CELLS`] lines, [`MAX_LABELS`] of them named).
pub(super) fn draw_loss_lr<DB: DrawingBackend>(
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
    let boundaries = task_starts(steps);
    let series = |f: fn(&StepLog) -> f64| -> Vec<(f64, f64)> {
        steps
            .iter()
            .filter(|s| f(s).is_finite())
            .map(|s| (s.global_step as f64, f(s)))
            .collect()
    };
    let loss = series(|s| s.loss);
    let lr = series(|s| s.lr);
    let lr_name = r
        .config
        .pointer("/optimizer/type")
        .and_then(|v| v.as_str())
        .map_or_else(
            || "learning rate".to_string(),
            |o| format!("learning rate ({o})"),
        );
    let panels = [
        (
            &upper,
            &loss,
            "loss",
            "training loss (window mean)",
            PALETTE[0],
        ),
        (&lower, &lr, "learning rate", lr_name.as_str(), PALETTE[3]),
    ];
    for (area, series, y_desc, label, colour) in panels {
        step_panel(area, series, (y_desc, label), colour, x_max, &boundaries)?;
    }
    Ok(())
}

/// One panel of [`draw_loss_lr`]: `series` against the global step up to `x_max`, the axis
/// named `names.0` and the legend entry `names.1`, and the tasks' `boundaries`.
fn step_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    series: &[(f64, f64)],
    (y_desc, label): (&str, &str),
    colour: RGBColor,
    x_max: f64,
    boundaries: &[(usize, f64)],
) -> Drawn<DB> {
    let m = series.iter().map(|p| p.1).fold(0.0, f64::max);
    // Headroom for the legend in the upper right corner.
    let y_top = if m > 0.0 { m * 1.3 } else { 1.0 };
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
    // The named boundaries are a subset of the drawn ones.
    let drawn = spread(boundaries.len(), MAX_MATRIX_CELLS);
    let named = spread(drawn.len(), MAX_LABELS);
    for (p, k) in drawn.into_iter().enumerate() {
        let (task, x) = boundaries[k];
        chart.draw_series(LineSeries::new(vec![(x, 0.0), (x, y_top)], grey))?;
        if named.binary_search(&p).is_ok() {
            let style = TextStyle::from((FONT, 14).into_font())
                .color(&grey)
                .pos(Pos::new(HPos::Left, VPos::Top));
            chart.draw_series(std::iter::once(Text::new(
                format!(" T{task}"),
                (x, y_top),
                style,
            )))?;
        }
    }
    let style = colour.stroke_width(2);
    chart
        .draw_series(LineSeries::new(series.to_vec(), style))?
        .label(label)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font((FONT, 16))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}
