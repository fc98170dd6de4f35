//! Pictures and side-by-side tables of finished runs: `engram report` and `engram compare`.
//!
//! Why this module draws its own text: plotters' default `ttf` feature finds fonts through the
//! system (fontconfig), so a plot rendered on a bare machine or in CI would fail or lose every
//! label. engram enables plotters' `ab_glyph` feature instead and registers DejaVu Sans
//! (embedded by the `dejavu` crate, a free licence) as `sans-serif` before drawing, so PNGs carry
//! their axis labels, task names and legends wherever they are rendered. SVGs keep text as
//! `<text>` elements (searchable, and drawn by the viewer's own sans-serif font). In PNGs the
//! glyphs are placed by engram (`glyphs`: plotters' own placement raises a decimal point and
//! drops side bearings, `0·75` for `0.75`).
//!
//! Every figure is rendered in memory (an SVG string, an RGB buffer encoded as PNG) and written
//! with `write_atomic`, so a reader never sees a half-written picture.
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
//!
//! The rooms: `load` reads a run (`report.json`, `steps.csv`), `plot` writes figures (drawn in
//! `figures`), `compare` computes `engram compare`'s rows and table, and `reference` renders
//! the registry for `engram list` and the book's reference page.

mod compare;
mod figures;
mod glyphs;
mod load;
mod plot;
mod reference;

pub use compare::{
    PLASTICITY_GAP, RunRow, Stat, benchmark, compare, compare_table, data_differences, learned,
    learned_of, plasticity_warnings, run_row,
};
pub use load::{RunFiles, load_report, load_run, parse_steps_csv};
pub use plot::{
    COMPARE_FIGURE, FIGURE_SIZE, FIGURES, MAX_BARS, MAX_CURVES, MAX_LABELS, MAX_MATRIX_CELLS,
    render, render_dir, render_rows,
};
pub use reference::{RegistryFormat, reference_markdown, registry_text, registry_text_of};

/// Bytes in a mebibyte (the unit of memory in figures and tables).
const MIB: f64 = 1024.0 * 1024.0;
