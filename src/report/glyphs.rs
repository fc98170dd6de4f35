//! Text in PNG figures, drawn glyph by glyph where each glyph belongs.
//!
//! plotters 0.3.7's `ab_glyph` text drops each glyph's left side bearing (every glyph starts at
//! the left edge of its advance, so `0.75` reads `0. 75`) and rounds each glyph's vertical offset
//! toward zero from `size / 2 + top` (digits, whose top lies above that line, land up to a pixel
//! low, a period up to a pixel high: `0·75`). [`CrispText`] wraps a backend and draws text of
//! the figures' font ([`FONT`]) itself: every glyph outlined at its exact pen position
//! (advance and kerning summed in `f32`, its own bounds), on the baseline plotters uses
//! (`size / 2` below the layout box's top, rounded down to a pixel edge), so labels keep their place and only the glyphs move
//! to where the font puts them. Every other call goes to the wrapped backend unchanged.

use super::plot::FONT;
use ab_glyph::{Font, FontRef, ScaleFont, point};
use plotters::prelude::DrawingBackend;
use plotters_backend::text_anchor::{HPos, VPos};
use plotters_backend::{
    BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingErrorKind,
};

/// DejaVu Sans (the figures' font), parsed once; `None` when the embedded font cannot be read
/// (text then goes to the wrapped backend).
fn font() -> Option<&'static FontRef<'static>> {
    static FONT_REF: std::sync::OnceLock<Option<FontRef<'static>>> = std::sync::OnceLock::new();
    FONT_REF
        .get_or_init(|| FontRef::try_from_slice(dejavu::sans::regular()).ok())
        .as_ref()
}

/// The pixels of `text` at `size` pixels per em in DejaVu Sans: `(x, y, coverage)` with the
/// pen starting at x = 0 and the baseline at y = `⌊size / 2⌋` (plotters' convention, on a
/// pixel edge so that every glyph's foot ends on the same row), coverage in `[0, 1]`.
pub(super) fn rasterize(text: &str, size: f32) -> Vec<(i32, i32, f32)> {
    let Some(font) = font() else {
        return Vec::new();
    };
    let scaled = font.as_scaled(size);
    let mut pixels = Vec::new();
    let mut pen = 0f32;
    let mut prev = None;
    for c in text.chars() {
        let id = scaled.glyph_id(c);
        if let Some(p) = prev {
            pen += scaled.kern(p, id);
        }
        prev = Some(id);
        let glyph = id.with_scale_and_position(size, point(pen, (size / 2.0).floor()));
        if let Some(outline) = font.outline_glyph(glyph) {
            let b = outline.px_bounds();
            let (x0, y0) = (b.min.x as i32, b.min.y as i32);
            outline.draw(|x, y, cov| {
                if cov > 0.0 {
                    pixels.push((x0 + x as i32, y0 + y as i32, cov.min(1.0)));
                }
            });
        }
        pen += scaled.h_advance(id);
    }
    pixels
}

/// A backend whose text of the figures' font is drawn by [`rasterize`] (module docs).
pub(super) struct CrispText<DB>(pub DB);

impl<DB: DrawingBackend> DrawingBackend for CrispText<DB> {
    type ErrorType = DB::ErrorType;

    fn get_size(&self) -> (u32, u32) {
        self.0.get_size()
    }

    fn ensure_prepared(&mut self) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.0.ensure_prepared()
    }

    fn present(&mut self) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.0.present()
    }

    fn draw_pixel(
        &mut self,
        point: BackendCoord,
        color: BackendColor,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.0.draw_pixel(point, color)
    }

    fn draw_line<S: BackendStyle>(
        &mut self,
        from: BackendCoord,
        to: BackendCoord,
        style: &S,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.0.draw_line(from, to, style)
    }

    fn draw_rect<S: BackendStyle>(
        &mut self,
        upper_left: BackendCoord,
        bottom_right: BackendCoord,
        style: &S,
        fill: bool,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.0.draw_rect(upper_left, bottom_right, style, fill)
    }

    fn draw_path<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        path: I,
        style: &S,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.0.draw_path(path, style)
    }

    fn draw_circle<S: BackendStyle>(
        &mut self,
        center: BackendCoord,
        radius: u32,
        style: &S,
        fill: bool,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.0.draw_circle(center, radius, style, fill)
    }

    fn fill_polygon<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        vert: I,
        style: &S,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.0.fill_polygon(vert, style)
    }

    fn blit_bitmap(
        &mut self,
        pos: BackendCoord,
        size: (u32, u32),
        src: &[u8],
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.0.blit_bitmap(pos, size, src)
    }

    fn estimate_text_size<TStyle: BackendTextStyle>(
        &self,
        text: &str,
        style: &TStyle,
    ) -> Result<(u32, u32), DrawingErrorKind<Self::ErrorType>> {
        self.0.estimate_text_size(text, style)
    }

    /// The text of [`FONT`] placed as plotters places it (its layout box, anchor and rotation),
    /// each glyph drawn by [`rasterize`]; other fonts go to the wrapped backend.
    fn draw_text<TStyle: BackendTextStyle>(
        &mut self,
        text: &str,
        style: &TStyle,
        pos: BackendCoord,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        let color = style.color();
        if style.family().as_str() != FONT || font().is_none() {
            return self.0.draw_text(text, style, pos);
        }
        if color.alpha == 0.0 {
            return Ok(());
        }
        let ((min_x, min_y), (max_x, max_y)) = style
            .layout_box(text)
            .map_err(|e| DrawingErrorKind::FontError(Box::new(e)))?;
        let (width, height) = (max_x - min_x, max_y - min_y);
        let dx = match style.anchor().h_pos {
            HPos::Left => 0,
            HPos::Right => -width,
            HPos::Center => -width / 2,
        };
        let dy = match style.anchor().v_pos {
            VPos::Top => 0,
            VPos::Center => -height / 2,
            VPos::Bottom => -height,
        };
        let trans = style.transform();
        let (w, h) = self.get_size();
        for (x, y, cov) in rasterize(text, style.size() as f32) {
            let (x, y) = trans.transform(x + dx - min_x, y + dy - min_y);
            let (x, y) = (pos.0 + x, pos.1 + y);
            if x >= 0 && x < w as i32 && y >= 0 && y < h as i32 {
                self.0.draw_pixel((x, y), color.mix(f64::from(cov)))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rows a glyph of `text` at `size` covers by more than half, as (top, bottom), for the
    /// glyph whose pixels lie in `[x0, x1)`.
    fn rows(px: &[(i32, i32, f32)], x0: i32, x1: i32) -> (i32, i32) {
        let ys: Vec<i32> = px
            .iter()
            .filter(|(x, _, c)| *x >= x0 && *x < x1 && *c > 0.5)
            .map(|p| p.1)
            .collect();
        (*ys.iter().min().unwrap(), *ys.iter().max().unwrap())
    }

    /// In "1.75" the period sits on the baseline with the digits (its bottom row is the flat
    /// foot of the 1's),
    /// and starts after its own left side bearing, not at the end of the 0's advance: at every
    /// size the figures use, odd sizes included (13 and 15 put plotters' period a pixel high).
    #[test]
    fn the_decimal_point_sits_on_the_baseline_where_the_font_puts_it() {
        let font = font().expect("DejaVu Sans parses");
        for size in [12.0f32, 13.0, 14.0, 15.0, 16.0, 18.0, 20.0, 26.0] {
            let s = font.as_scaled(size);
            let adv = |c| s.h_advance(s.glyph_id(c));
            let px = rasterize("1.75", size);
            let zero_end = adv('1');
            let dot_end = zero_end + adv('.');
            let (zero_top, zero_bottom) = rows(&px, 0, zero_end.floor() as i32);
            let (dot_top, dot_bottom) = rows(&px, zero_end.ceil() as i32, dot_end.floor() as i32);
            // The baseline is at size/2: the digit's bottom and the point's are on it.
            let baseline = (size / 2.0).floor() as i32 - 1;
            assert!(
                (zero_bottom - baseline).abs() <= 1,
                "size {size}: 0 ends at row {zero_bottom}, baseline {baseline}"
            );
            assert_eq!(
                dot_bottom, zero_bottom,
                "size {size}: the point ends at row {dot_bottom}, the 1 at {zero_bottom}"
            );
            assert!(dot_top > zero_top + (size * 0.4) as i32, "size {size}");
            // The point's ink starts at its left side bearing (DejaVu: 0.107 em of the
            // 0.318 em advance), centred in its advance, not at its left edge.
            let ink: Vec<i32> = px
                .iter()
                .filter(|(x, y, c)| {
                    *c > 0.5
                        && *y >= dot_top
                        && *x >= zero_end.ceil() as i32
                        && (*x as f32) < dot_end
                })
                .map(|p| p.0)
                .collect();
            let left = *ink.iter().min().unwrap() as f32;
            let bearing = s.h_side_bearing(s.glyph_id('.'));
            assert!(
                (left - (zero_end + bearing)).abs() <= 1.0,
                "size {size}: the point starts at {left}, want {}",
                zero_end + bearing
            );
        }
    }
}
