//! Attention heatmaps: a `[.., N, M]` tensor drawn as PNG or SVG (`attnc plot`,
//! `attnc run --plot`).
//!
//! One batch element is drawn as a row of heatmaps, one per head, queries down and keys
//! across (the axes titled so), with one colour scale for all of them and a colour bar
//! beside it. The axes are
//! read as PyTorch's attention weights are: the last two are queries and keys, the one before
//! them heads (from rank 4 on), and everything before that is the batch, flattened.
//!
//! Drawing is `plotters` on its bitmap and SVG backends. Text goes through its `ab_glyph`
//! font support with DejaVu Sans Mono embedded in the binary, so a plot looks the same on a
//! machine without any font installed. The PNG is encoded here with the `png` crate, and
//! either file is written whole or not at all.

use crate::runtime::{RunError, Tensor};
use plotters::backend::{BitMapBackend, DrawingBackend, SVGBackend};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::colors::colormaps::{ColorMap, ViridisRGB};
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::ops::Range;
use std::path::Path;

/// The name the embedded font is registered under.
const FONT: &str = "attnc-dejavu-sans-mono";
const FONT_BYTES: &[u8] = include_bytes!("../assets/fonts/DejaVuSansMono.ttf");
/// Text height in pixels, and the width of one character of it.
const TEXT: u32 = 12;
const CHAR_WIDTH: u32 = 8;
/// Space around and between the maps.
const GAP: u32 = 16;
/// Room for an axis title ("query", "key"): a line of text and a gap.
const AXIS_TITLE: u32 = TEXT + TEXT / 2;
/// The colour bar's width, and its room for tick labels.
const BAR: u32 = 16;

/// The most cells one plot draws: beyond it an image is too large to look at, and to
/// hold in memory (at least 2 pixels a side, 3 bytes a pixel).
pub const MAX_CELLS: usize = 1 << 22;

/// What to draw from a tensor.
#[derive(Clone, Debug, Default)]
pub struct PlotOptions {
    /// The batch element (the flattened leading axes).
    pub batch: usize,
    /// The heads, all of them when `None`.
    pub heads: Option<Range<usize>>,
    /// Tick labels of the queries (rows), and of the keys (columns) when they differ.
    pub queries: Option<Vec<String>>,
    pub keys: Option<Vec<String>>,
}

/// The maps selected from a tensor: `heads` of them, each `n` by `m`, row-major.
pub struct Maps<'a> {
    pub heads: Range<usize>,
    pub n: usize,
    pub m: usize,
    data: &'a [f32],
}

impl Maps<'_> {
    /// The value at query `row`, key `col` of the `k`-th drawn map.
    pub fn value(&self, k: usize, row: usize, col: usize) -> f32 {
        self.data[(k * self.n + row) * self.m + col]
    }

    /// The colour scale: from the smaller of 0 and the least value to the largest, so that
    /// zero (a masked key) is always the bottom of the scale for probabilities.
    pub fn range(&self) -> (f32, f32) {
        let finite = self.data.iter().copied().filter(|x| x.is_finite());
        let (lo, hi) = finite.fold((0f32, f32::MIN), |(lo, hi), x| (lo.min(x), hi.max(x)));
        match hi > lo {
            true => (lo, hi),
            false => (lo, lo + 1.0),
        }
    }

    /// Whether a drawn cell is NaN, so that the legend names its colour.
    pub fn has_nan(&self) -> bool {
        self.data.iter().any(|x| x.is_nan())
    }
}

/// Select the maps `opts` asks for from `t` (named `name` in messages).
pub fn select<'a>(t: &'a Tensor, name: &str, opts: &PlotOptions) -> Result<Maps<'a>, RunError> {
    let Selection { heads, h, n, m } = selection(&t.shape, name, opts)?;
    let start = (opts.batch * h + heads.start) * n * m;
    let end = (opts.batch * h + heads.end) * n * m;
    Ok(Maps {
        heads,
        n,
        m,
        data: &t.data[start..end],
    })
}

/// The heads, and the sizes, that `opts` selects of a tensor.
pub struct Selection {
    pub heads: Range<usize>,
    /// How many heads the tensor has, and each map's rows and columns.
    pub h: usize,
    pub n: usize,
    pub m: usize,
}

/// Check that `opts` selects something of a tensor of `shape` (named `name` in messages):
/// before a run, from the sizes its dims are bound to, and again on the result.
pub fn selection(shape: &[usize], name: &str, opts: &PlotOptions) -> Result<Selection, RunError> {
    let error = |msg: String| RunError::new(None, msg);
    let rank = shape.len();
    if rank < 2 {
        return Err(error(format!(
            "`{name}` has shape {shape:?}: a heatmap needs a [.., N, M] tensor"
        )));
    }
    // An empty tensor has no batch element to count: `[1, 0, 3]` was "0 batch elements".
    if shape.contains(&0) {
        return Err(error(format!(
            "`{name}` has shape {shape:?}, no elements: there is nothing to draw"
        )));
    }
    let (n, m) = (shape[rank - 2], shape[rank - 1]);
    let h = if rank >= 4 { shape[rank - 3] } else { 1 };
    let batch = shape.iter().product::<usize>() / (n * m * h).max(1);
    if opts.batch >= batch {
        return Err(error(format!(
            "`{name}` has {batch} batch elements (shape {shape:?}), so `--batch {}` is out of range",
            opts.batch
        )));
    }
    let heads = opts.heads.clone().unwrap_or(0..h);
    if heads.is_empty() || heads.end > h {
        return Err(error(format!(
            "`{name}` has {h} heads (shape {shape:?}), so `--heads {}..{}` selects none or too many",
            heads.start, heads.end
        )));
    }
    for (labels, len, what) in [(&opts.queries, n, "queries"), (&opts.keys, m, "keys")] {
        if let Some(l) = labels.as_ref().filter(|l| l.len() != len) {
            return Err(error(format!(
                "{} labels for `{name}`'s {len} {what} (shape {shape:?})",
                l.len()
            )));
        }
    }
    let cells = heads.len().saturating_mul(n).saturating_mul(m);
    if cells > MAX_CELLS {
        return Err(error(format!(
            "`{name}` of shape {shape:?} has {cells} cells in the selected heads, more than the {MAX_CELLS} a plot draws: select fewer with `--heads`"
        )));
    }
    Ok(Selection { heads, h, n, m })
}

/// The image formats a plot is written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Png,
    Svg,
}

/// The format of a plot file, by its extension.
pub fn format(path: &Path) -> Result<Format, String> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    match ext.as_deref() {
        Some("png") => Ok(Format::Png),
        Some("svg") => Ok(Format::Svg),
        _ => Err(format!("`{}`: a plot is a .png or an .svg file", path.display())),
    }
}

/// Where everything goes, in pixels: computed before drawing so that a test can find a
/// cell's pixels. Maps are laid out in rows of at most [`COLUMNS`], each in a panel with
/// its title and key labels above and its query labels to the left.
#[derive(Clone, Debug, PartialEq)]
pub struct Layout {
    /// The side of one cell.
    pub cell: u32,
    /// How many maps a row of panels holds.
    pub columns: u32,
    /// Room for the query axis's title and labels left of a map, and for the map's title,
    /// the key axis's title and labels above it.
    pub label_width: u32,
    pub header: u32,
    /// One map's width and height.
    pub map: (u32, u32),
    /// The colour bar's left edge, its top edge and its height.
    pub bar: (u32, u32, u32),
    /// The top-left pixel of the NaN swatch below the bar, when a cell is NaN.
    pub nan: Option<(u32, u32)>,
    pub size: (u32, u32),
}

/// The most maps side by side.
pub const COLUMNS: usize = 4;

impl Layout {
    pub fn new(maps: &Maps, opts: &PlotOptions) -> Layout {
        let longest = |l: &Option<Vec<String>>, len: usize| {
            let ticks = l.as_ref().map_or(digits(len), |l| {
                l.iter().map(|s| s.chars().count()).max().unwrap_or(0)
            });
            ticks as u32 * CHAR_WIDTH + TEXT / 2
        };
        let cell = (320 / maps.n.max(maps.m).max(1) as u32).clamp(2, 32);
        let map = (cell * maps.m as u32, cell * maps.n as u32);
        let label_width = AXIS_TITLE + longest(&opts.queries, maps.n);
        let header = TEXT + AXIS_TITLE + longest(key_labels(opts), maps.m);
        let count = maps.heads.len() as u32;
        let columns = count.min(COLUMNS as u32);
        let rows = count.div_ceil(columns);
        let panel = (label_width + map.0 + GAP, header + map.1 + GAP);
        let bar_top = GAP + header;
        let bar = (GAP + columns * panel.0, bar_top, rows * panel.1 - header - GAP);
        let mut size = (bar.0 + BAR + 8 * CHAR_WIDTH + GAP, GAP + rows * panel.1);
        let nan = maps.has_nan().then(|| (bar.0, bar.1 + bar.2 + TEXT / 2));
        if nan.is_some() {
            size.1 += TEXT + TEXT / 2;
        }
        Layout {
            cell,
            columns,
            label_width,
            header,
            map,
            bar,
            nan,
            size,
        }
    }

    /// The top-left pixel of the cell at `row`, `col` of the `k`-th drawn map.
    pub fn cell_at(&self, k: usize, row: usize, col: usize) -> (u32, u32) {
        let (panel_row, panel_col) = (k as u32 / self.columns, k as u32 % self.columns);
        let panel = (
            self.label_width + self.map.0 + GAP,
            self.header + self.map.1 + GAP,
        );
        let x = GAP + panel_col * panel.0 + self.label_width + col as u32 * self.cell;
        let y = GAP + panel_row * panel.1 + self.header + row as u32 * self.cell;
        (x, y)
    }
}

/// The key labels: their own, or the queries' (self-attention).
fn key_labels(opts: &PlotOptions) -> &Option<Vec<String>> {
    match opts.keys {
        Some(_) => &opts.keys,
        None => &opts.queries,
    }
}

fn digits(n: usize) -> usize {
    n.saturating_sub(1).to_string().len()
}

/// The colour of a NaN cell (a fully masked row under `-inf`): a grey, which viridis never
/// gives, named in the colour bar's legend.
pub const NAN_COLOUR: RGBColor = RGBColor(160, 160, 160);

/// The colour of `v` on the scale `lo..hi`: `±inf` and values beyond the scale at its
/// ends, NaN grey. The position is computed in `f64`, so a scale as wide as `f32`'s range
/// does not overflow.
pub fn colour(v: f32, (lo, hi): (f32, f32)) -> RGBColor {
    if v.is_nan() {
        return NAN_COLOUR;
    }
    let t = (f64::from(v) - f64::from(lo)) / (f64::from(hi) - f64::from(lo));
    let t = if t.is_nan() { 0.0 } else { t.clamp(0.0, 1.0) };
    ViridisRGB.get_color_normalized(t, 0.0, 1.0)
}

/// Draw `maps` into `path`, PNG or SVG by its extension.
pub fn save(maps: &Maps, name: &str, opts: &PlotOptions, path: &Path) -> Result<(), RunError> {
    let layout = Layout::new(maps, opts);
    let fail = |why: String| RunError::new(None, format!("cannot write `{}`: {why}", path.display()));
    let bytes = match format(path).map_err(|e| RunError::new(None, e))? {
        Format::Png => png_bytes(maps, name, opts, &layout).map_err(fail)?,
        Format::Svg => {
            let mut svg = String::new();
            let area = SVGBackend::with_string(&mut svg, layout.size).into_drawing_area();
            draw(&area, maps, name, opts, &layout).map_err(fail)?;
            drop(area);
            svg.into_bytes()
        }
    };
    std::fs::write(path, bytes).map_err(|e| fail(e.to_string()))
}

/// The PNG of `maps`, as [`save`] writes it to a `.png` file.
pub fn png(maps: &Maps, name: &str, opts: &PlotOptions) -> Result<Vec<u8>, RunError> {
    let layout = Layout::new(maps, opts);
    png_bytes(maps, name, opts, &layout)
        .map_err(|why| RunError::new(None, format!("cannot draw `{name}`: {why}")))
}

fn png_bytes(maps: &Maps, name: &str, opts: &PlotOptions, layout: &Layout) -> Result<Vec<u8>, String> {
    let (w, h) = layout.size;
    let mut rgb = vec![0u8; w as usize * h as usize * 3];
    {
        let area = BitMapBackend::with_buffer(&mut rgb, layout.size).into_drawing_area();
        draw(&area, maps, name, opts, layout)?;
        area.present().map_err(|e| e.to_string())?;
    }
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, w, h);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header().map_err(|e| e.to_string())?;
    writer.write_image_data(&rgb).map_err(|e| e.to_string())?;
    writer.finish().map_err(|e| e.to_string())?;
    Ok(out)
}

fn register_font() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // The bytes are a font this crate ships; were they not, text would be missing, not
        // the plot.
        let _ = plotters::style::register_font(FONT, FontStyle::Normal, FONT_BYTES);
    });
}

fn draw<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    maps: &Maps,
    name: &str,
    opts: &PlotOptions,
    layout: &Layout,
) -> Result<(), String> {
    register_font();
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    area.fill(&WHITE).map_err(e)?;
    let text = |anchor: Pos| {
        TextStyle::from((FONT, TEXT as f64).into_font())
            .color(&BLACK)
            .pos(anchor)
    };
    let range = maps.range();
    let c = layout.cell as i32;
    for (k, head) in maps.heads.clone().enumerate() {
        let (x0, y0) = layout.cell_at(k, 0, 0);
        let (x0, y0) = (x0 as i32, y0 as i32);
        let title = format!("{name}[{}, {head}]", opts.batch);
        let title_at = (x0, y0 - layout.header as i32);
        area.draw_text(&title, &text(Pos::new(HPos::Left, VPos::Top)), title_at)
            .map_err(e)?;
        axis_titles(area, layout, (x0, y0)).map_err(e)?;
        for row in 0..maps.n {
            for col in 0..maps.m {
                let (x, y) = (x0 + col as i32 * c, y0 + row as i32 * c);
                let fill = colour(maps.value(k, row, col), range).filled();
                area.draw(&Rectangle::new([(x, y), (x + c, y + c)], fill))
                    .map_err(e)?;
            }
        }
        ticks(area, maps, opts, layout, (x0, y0)).map_err(e)?;
    }
    colour_bar(area, range, layout).map_err(e)
}

/// "key" centred above a map's key labels, "query" along the left of its query labels.
fn axis_titles<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    layout: &Layout,
    (x0, y0): (i32, i32),
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let font = (FONT, TEXT as f64).into_font().color(&BLACK);
    let (w, h) = (layout.map.0 as i32, layout.map.1 as i32);
    let key_at = (
        x0 + w / 2,
        y0 - layout.header as i32 + TEXT as i32 + TEXT as i32 / 4,
    );
    area.draw_text("key", &font.pos(Pos::new(HPos::Center, VPos::Top)), key_at)?;
    let query = font
        .transform(FontTransform::Rotate270)
        .pos(Pos::new(HPos::Center, VPos::Top));
    let query_at = (x0 - layout.label_width as i32, y0 + h / 2);
    area.draw_text("query", &query, query_at)
}

/// Tick labels: the tokens, or every few indices, left of the rows and above the columns.
fn ticks<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    maps: &Maps,
    opts: &PlotOptions,
    layout: &Layout,
    (x0, y0): (i32, i32),
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let c = layout.cell as i32;
    // Labels at least one text line apart.
    let every = (TEXT as usize).div_ceil(layout.cell as usize).max(1);
    let label = |labels: &Option<Vec<String>>, i: usize| match labels {
        Some(l) => l[i].clone(),
        None => i.to_string(),
    };
    let font = (FONT, TEXT as f64).into_font().color(&BLACK);
    let rows = font.pos(Pos::new(HPos::Right, VPos::Center));
    for row in (0..maps.n).step_by(every) {
        let at = (x0 - TEXT as i32 / 2, y0 + row as i32 * c + c / 2);
        area.draw_text(&label(&opts.queries, row), &rows, at)?;
    }
    let cols = font
        .transform(FontTransform::Rotate270)
        .pos(Pos::new(HPos::Left, VPos::Center));
    for col in (0..maps.m).step_by(every) {
        let at = (x0 + col as i32 * c + c / 2, y0 - TEXT as i32 / 2);
        area.draw_text(&label(key_labels(opts), col), &cols, at)?;
    }
    Ok(())
}

/// A colour-bar label, its sign written as matplotlib writes tick labels: U+2212 MINUS
/// SIGN, as wide as a digit. A hyphen is narrow, and the bitmap backend draws each glyph at
/// the left of its cell (plotters' `ab_glyph` text drops side bearings), so `-0.242` showed
/// as `- 0.242`.
fn bar_label(v: f64) -> String {
    let text = format!("{v:.3}");
    match text.strip_prefix('-') {
        Some(digits) => format!("\u{2212}{digits}"),
        None => text,
    }
}

/// The colour scale as a vertical bar, the largest value on top, with its ends and middle
/// labelled.
fn colour_bar<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    (lo, hi): (f32, f32),
    layout: &Layout,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let (x, top, h) = (
        layout.bar.0 as i32,
        layout.bar.1 as i32,
        layout.bar.2.max(1) as i32,
    );
    for y in 0..h {
        let v = f64::from(hi) - (f64::from(hi) - f64::from(lo)) * f64::from(y) / f64::from((h - 1).max(1));
        let v = v as f32;
        let rect = [(x, top + y), (x + BAR as i32, top + y + 1)];
        area.draw(&Rectangle::new(rect, colour(v, (lo, hi)).filled()))?;
    }
    let style = (FONT, TEXT as f64)
        .into_font()
        .color(&BLACK)
        .pos(Pos::new(HPos::Left, VPos::Center));
    let at = x + BAR as i32 + 4;
    let middle = (f64::from(lo) + f64::from(hi)) / 2.0;
    for (v, y) in [
        (f64::from(hi), top),
        (middle, top + h / 2),
        (f64::from(lo), top + h - 1),
    ] {
        area.draw_text(&bar_label(v), &style, (at, y))?;
    }
    if let Some((x, y)) = layout.nan {
        let (x, y) = (x as i32, y as i32);
        let swatch = [(x, y), (x + BAR as i32, y + TEXT as i32)];
        area.draw(&Rectangle::new(swatch, NAN_COLOUR.filled()))?;
        area.draw_text("NaN", &style, (at, y + TEXT as i32 / 2))?;
    }
    Ok(())
}
