//! Plots of the experiments (each writes a CSV and a plot beside its
//! table, so that a result can be seen and re-analysed), drawn with the
//! `plotters` crate as SVG and, beside it with the same name, PNG.
//!
//! Two shapes cover the experiments: [`lines`] (a measure against a
//! varied parameter, one line per system, optionally on log axes) and
//! [`bars`] (one group of bars per category, one bar per system, with
//! optional error whiskers). Text is laid out with a TrueType font found
//! at run time ([`FONTS`], or the file named by `SHOAL_PLOT_FONT`), so
//! that no font library of the system is linked. A failure is one
//! [`PlotError`] sentence, and a bench treats it as a warning, not as a
//! failed measurement.

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// A plot could not be written.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// Drawing or writing the SVG failed.
    #[error("cannot draw the plot {}: {message}", path.display())]
    Draw { path: PathBuf, message: String },
    /// There was nothing with a finite value to draw.
    #[error("cannot draw the plot {}: no finite values", path.display())]
    Empty { path: PathBuf },
    /// No font to lay the text out with.
    #[error("cannot draw the plot {}: no TrueType font at {} (install fonts-dejavu-core, or name one in SHOAL_PLOT_FONT)", path.display(), FONTS.join(", "))]
    NoFont { path: PathBuf },
}

/// Where the plots' font is looked for, in this order (Debian's and
/// Fedora's DejaVu and Liberation sans fonts).
pub const FONTS: [&str; 4] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
];

/// Registers the first font found as plotters' "sans-serif", once per
/// process; whether there is one.
fn font() -> bool {
    static FOUND: OnceLock<bool> = OnceLock::new();
    *FOUND.get_or_init(|| {
        let named = std::env::var_os("SHOAL_PLOT_FONT").map(PathBuf::from);
        let candidates = named.into_iter().chain(FONTS.iter().map(PathBuf::from));
        candidates.filter_map(|p| std::fs::read(p).ok()).any(|bytes| {
            // plotters keeps the font for the life of the process: leaked once.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok()
        })
    })
}

/// The PNG beside an SVG path.
fn png_of(svg: &Path) -> PathBuf {
    svg.with_extension("png")
}

/// One line of a [`lines`] plot: its legend and its (x, y) points.
pub struct Line {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// One system's bars in a [`bars`] plot: per category, the value and the
/// half-width of its whisker (None: not measured, no bar).
pub struct BarSeries {
    pub name: String,
    pub values: Vec<Option<(f64, f64)>>,
}

/// Axes and title of a plot.
pub struct Frame<'a> {
    pub title: &'a str,
    pub x_desc: &'a str,
    pub y_desc: &'a str,
    pub log_x: bool,
    pub log_y: bool,
}

const SIZE: (u32, u32) = (900, 540);

/// A distinguishable colour per series (the first are the systems'
/// usual order: spt, hvt, process, runc, runsc, …).
fn colour(i: usize) -> RGBColor {
    const C: [RGBColor; 8] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
    ];
    C[i % C.len()]
}

fn draw_err(path: &Path) -> impl Fn(String) -> PlotError + '_ {
    move |message| PlotError::Draw { path: path.to_path_buf(), message }
}

/// The range [lo, hi] of `xs` padded for drawing; on a log axis, only
/// positive values count.
fn span(xs: impl Iterator<Item = f64>, log: bool, from_zero: bool) -> Option<(f64, f64)> {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for x in xs.filter(|x| x.is_finite() && (!log || *x > 0.0)) {
        lo = lo.min(x);
        hi = hi.max(x);
    }
    if !lo.is_finite() {
        return None;
    }
    if log {
        return Some((lo / 1.5, hi * 1.5));
    }
    if from_zero {
        lo = lo.min(0.0);
    }
    let pad = if hi > lo { (hi - lo) * 0.05 } else { hi.abs().max(1.0) * 0.1 };
    Some((if from_zero && lo >= 0.0 { 0.0 } else { lo - pad }, hi + pad))
}

/// Draws `lines` into the SVG file `path` and the PNG file beside it.
pub fn lines(path: &Path, frame: &Frame, lines: &[Line]) -> Result<(), PlotError> {
    let all = || lines.iter().flat_map(|l| l.points.iter());
    let (x0, x1) = span(all().map(|p| p.0), frame.log_x, false).ok_or_else(|| PlotError::Empty { path: path.to_path_buf() })?;
    let (y0, y1) = span(all().map(|p| p.1), frame.log_y, true).ok_or_else(|| PlotError::Empty { path: path.to_path_buf() })?;
    if !font() {
        return Err(PlotError::NoFont { path: path.to_path_buf() });
    }
    let r = (x0, x1, y0, y1);
    lines_on(&SVGBackend::new(path, SIZE).into_drawing_area(), frame, lines, r).map_err(draw_err(path))?;
    let png = png_of(path);
    let drawn = lines_on(&BitMapBackend::new(&png, SIZE).into_drawing_area(), frame, lines, r);
    drawn.map_err(draw_err(&png))
}

/// [`lines`] on one backend, with the axes' ranges `r` (x0, x1, y0, y1).
fn lines_on<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, frame: &Frame, lines: &[Line], r: (f64, f64, f64, f64)) -> Result<(), String> {
    let (x0, x1, y0, y1) = r;
    root.fill(&WHITE).map_err(|x| x.to_string())?;
    // The four axis combinations are four chart types in plotters.
    match (frame.log_x, frame.log_y) {
        (false, false) => draw_lines(root, frame, lines, x0..x1, y0..y1),
        (true, false) => draw_lines(root, frame, lines, (x0..x1).log_scale(), y0..y1),
        (false, true) => draw_lines(root, frame, lines, x0..x1, (y0..y1).log_scale()),
        (true, true) => draw_lines(root, frame, lines, (x0..x1).log_scale(), (y0..y1).log_scale()),
    }?;
    root.present().map_err(|x| x.to_string())
}

/// The chart of every plot: its title, margin and room for the axes' labels.
fn builder<'a, 'b, DB: DrawingBackend>(root: &'a DrawingArea<DB, Shift>, frame: &Frame) -> ChartBuilder<'a, 'b, DB> {
    let mut b = ChartBuilder::on(root);
    b.caption(frame.title, ("sans-serif", 18)).margin(12).x_label_area_size(45).y_label_area_size(70);
    b
}

fn draw_lines<DB: DrawingBackend, X, Y>(root: &DrawingArea<DB, Shift>, frame: &Frame, lines: &[Line], x: X, y: Y) -> Result<(), String>
where
    X: AsRangedCoord<Value = f64>,
    Y: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let mut chart = builder(root, frame).build_cartesian_2d(x, y).map_err(|e| e.to_string())?;
    chart.configure_mesh().x_desc(frame.x_desc).y_desc(frame.y_desc).light_line_style(WHITE).draw().map_err(|e| e.to_string())?;
    for (i, l) in lines.iter().enumerate() {
        let c = colour(i);
        let pts: Vec<(f64, f64)> = l.points.iter().copied().filter(|(a, b)| a.is_finite() && b.is_finite() && (!frame.log_y || *b > 0.0)).collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(l.name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
        chart.draw_series(pts.into_iter().map(|p| Circle::new(p, 3, c.filled()))).map_err(|e| e.to_string())?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(|e| e.to_string())
}

/// Draws grouped bars (one group per category) into the SVG file `path`
/// and the PNG file beside it; `frame.log_x` is ignored.
pub fn bars(path: &Path, frame: &Frame, categories: &[String], series: &[BarSeries]) -> Result<(), PlotError> {
    let tops = series.iter().flat_map(|s| s.values.iter().flatten().map(|(v, e)| v + e.max(0.0)));
    let bottoms = series.iter().flat_map(|s| s.values.iter().flatten().map(|(v, _)| *v));
    let (_, y1) = span(tops, frame.log_y, true).ok_or_else(|| PlotError::Empty { path: path.to_path_buf() })?;
    let (y0, _) = span(bottoms, frame.log_y, true).ok_or_else(|| PlotError::Empty { path: path.to_path_buf() })?;
    if !font() {
        return Err(PlotError::NoFont { path: path.to_path_buf() });
    }
    let y = (y0, y1);
    bars_on(&SVGBackend::new(path, SIZE).into_drawing_area(), frame, categories, series, y).map_err(draw_err(path))?;
    let png = png_of(path);
    let drawn = bars_on(&BitMapBackend::new(&png, SIZE).into_drawing_area(), frame, categories, series, y);
    drawn.map_err(draw_err(&png))
}

/// [`bars`] on one backend, with the y axis from `y.0` to `y.1`.
fn bars_on<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, frame: &Frame, categories: &[String], series: &[BarSeries], y: (f64, f64)) -> Result<(), String> {
    let (y0, y1) = y;
    let n = categories.len() as f64;
    root.fill(&WHITE).map_err(|x| x.to_string())?;
    if frame.log_y {
        draw_bars(root, frame, categories, series, 0.0..n, (y0..y1).log_scale(), y0)
    } else {
        draw_bars(root, frame, categories, series, 0.0..n, y0..y1, 0.0)
    }?;
    root.present().map_err(|x| x.to_string())
}

fn draw_bars<DB: DrawingBackend, Y>(
    root: &DrawingArea<DB, Shift>,
    frame: &Frame,
    categories: &[String],
    series: &[BarSeries],
    x: std::ops::Range<f64>,
    y: Y,
    base: f64,
) -> Result<(), String>
where
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let mut chart = builder(root, frame).build_cartesian_2d(x, y).map_err(|e| e.to_string())?;
    let names: Vec<String> = categories.to_vec();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(categories.len() * 2 + 1)
        .x_label_formatter(&|v: &f64| {
            // A label at the middle of each group only.
            let i = v.floor();
            if (v - i - 0.5).abs() < 1e-6 && i >= 0.0 {
                names.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .x_desc(frame.x_desc)
        .y_desc(frame.y_desc)
        .light_line_style(WHITE)
        .draw()
        .map_err(|e| e.to_string())?;
    let k = series.len().max(1) as f64;
    let w = 0.8 / k;
    for (j, s) in series.iter().enumerate() {
        let c = colour(j);
        let mut rects = Vec::new();
        let mut whiskers = Vec::new();
        for (i, v) in s.values.iter().enumerate() {
            let Some((v, err)) = v.filter(|(v, _)| v.is_finite() && (!frame.log_y || *v > 0.0)) else {
                continue;
            };
            let left = i as f64 + 0.1 + j as f64 * w;
            rects.push(Rectangle::new([(left, base), (left + w * 0.9, v)], c.filled()));
            if err.is_finite() && err > 0.0 {
                let mid = left + w * 0.45;
                let lo = if frame.log_y { (v - err).max(base) } else { v - err };
                whiskers.push(PathElement::new(vec![(mid, lo), (mid, v + err)], BLACK.stroke_width(1)));
            }
        }
        chart
            .draw_series(rects)
            .map_err(|e| e.to_string())?
            .label(s.name.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
        chart.draw_series(whiskers).map_err(|e| e.to_string())?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_lines_and_bars_as_svg_and_png() {
        if !font() {
            // No fonts-dejavu-core or the like: nothing to draw text with.
            eprintln!("skipped: plots: no TrueType font at {}", FONTS.join(", "));
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("l.svg");
        let frame = Frame { title: "t", x_desc: "clients", y_desc: "req/s", log_x: true, log_y: false };
        lines(&p, &frame, &[Line { name: "spt".into(), points: vec![(1.0, 10.0), (2.0, 20.0), (4.0, 15.0)] }]).unwrap();
        let s = std::fs::read_to_string(&p).unwrap();
        assert!(s.starts_with("<svg") && s.contains("spt") && s.contains("req/s"), "{s}");
        let b = dir.path().join("b.svg");
        let frame = Frame { title: "t", x_desc: "", y_desc: "ms", log_x: false, log_y: true };
        let series = vec![BarSeries { name: "runc".into(), values: vec![Some((300.0, 20.0)), None] }];
        bars(&b, &frame, &["noop".into(), "lua".into()], &series).unwrap();
        let s = std::fs::read_to_string(&b).unwrap();
        assert!(s.contains("runc") && s.contains("noop") && s.contains("<rect"), "{s}");
        for png in [dir.path().join("l.png"), dir.path().join("b.png")] {
            let bytes = std::fs::read(&png).unwrap();
            assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n") && bytes.len() > 1000, "{}: {} bytes", png.display(), bytes.len());
        }
    }

    #[test]
    fn nothing_finite_is_an_error_not_an_empty_plot() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("e.svg");
        let frame = Frame { title: "t", x_desc: "", y_desc: "", log_x: false, log_y: false };
        let e = lines(&p, &frame, &[Line { name: "x".into(), points: vec![(f64::NAN, 1.0)] }]).unwrap_err();
        assert!(e.to_string().contains("no finite values"), "{e}");
    }
}
