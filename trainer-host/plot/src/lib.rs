//! PNG line plots for results (accuracy per round, accuracy against ε): one function,
//! the font compiled in (`assets/DejaVuSansMono.ttf`), so plotting needs no system fonts.

use std::path::Path;
use std::sync::Once;

use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

const FONT: &[u8] = include_bytes!("../assets/DejaVuSansMono.ttf");
static FONT_ONCE: Once = Once::new();

/// One named line.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// Points `(x, y)`.
    pub points: Vec<(f64, f64)>,
}

/// Why a plot was not written.
#[derive(Debug, thiserror::Error)]
#[error("{path}: cannot draw the plot: {reason}")]
pub struct PlotError {
    /// The PNG.
    pub path: std::path::PathBuf,
    /// What failed.
    pub reason: String,
}

/// Caption font size: 22 px, smaller for a long title so that it fits the plot's width.
fn caption_size(title: &str) -> u32 {
    let n = title.chars().count().max(1) as u32;
    if n <= 70 {
        22
    } else {
        (22 * 70 / n).max(13)
    }
}

/// Writes a line plot of `series` to `path` (PNG, 900×560).
pub fn line_plot(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> Result<(), PlotError> {
    let err = |e: &dyn std::fmt::Display| PlotError {
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    FONT_ONCE.call_once(|| {
        // Registration only fails on a malformed font, which the test suite would catch.
        let _ = register_font("sans-serif", FontStyle::Normal, FONT);
    });
    let points = series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in points {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if x0 > x1 {
        return Err(err(&"no points to plot"));
    }
    if x1 - x0 < 1e-9 {
        x1 = x0 + 1.0;
    }
    let y0 = y0.min(0.0);
    let y1 = if y1 - y0 < 1e-9 { y0 + 1.0 } else { y1 * 1.05 };
    let root = BitMapBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", caption_size(title)))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(60)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(|e| err(&e))?;
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(
                s.points.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(|e| err(&e))?
            .label(s.name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// A viridis-like colour for `t` in [0, 1] (linear between five of viridis's stops).
fn viridis(t: f32) -> RGBColor {
    const STOPS: [(u8, u8, u8); 5] = [
        (68, 1, 84),
        (59, 82, 139),
        (33, 145, 140),
        (94, 201, 98),
        (253, 231, 37),
    ];
    let x = t.clamp(0.0, 1.0) * 4.0;
    let i = (x.floor() as usize).min(3);
    let f = x - i as f32;
    let mix = |a: u8, b: u8| (f32::from(a) + (f32::from(b) - f32::from(a)) * f).round() as u8;
    let (a, b) = (STOPS[i], STOPS[i + 1]);
    RGBColor(mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}

/// One matrix to draw as a heat map: `rows × cols` values, row-major (rows run along
/// the x axis: time frames; columns up the y axis: bins).
#[derive(Debug, Clone, Copy)]
pub struct Heatmap<'a> {
    /// Panel title.
    pub title: &'a str,
    /// The values.
    pub values: &'a [f32],
    /// Rows (x axis).
    pub rows: usize,
    /// Columns (y axis).
    pub cols: usize,
}

/// Writes heat maps side by side to `path` (PNG), all on one colour scale (the range of
/// every panel together): spectrograms of original and reconstructed features.
pub fn heatmaps(path: &Path, title: &str, panels: &[Heatmap]) -> Result<(), PlotError> {
    let err = |e: &dyn std::fmt::Display| PlotError {
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    FONT_ONCE.call_once(|| {
        let _ = register_font("sans-serif", FontStyle::Normal, FONT);
    });
    if panels.is_empty()
        || panels
            .iter()
            .any(|p| p.values.len() != p.rows * p.cols || p.rows == 0 || p.cols == 0)
    {
        return Err(err(&"every panel needs rows × cols values"));
    }
    let finite = panels
        .iter()
        .flat_map(|p| p.values.iter())
        .filter(|v| v.is_finite());
    let (lo, hi) = finite.fold((f32::MAX, f32::MIN), |(a, b), &v| (a.min(v), b.max(v)));
    let span = if hi > lo { hi - lo } else { 1.0 };
    let width = 420 * panels.len() as u32;
    let root = BitMapBackend::new(path, (width, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let root = root
        .titled(title, ("sans-serif", 20))
        .map_err(|e| err(&e))?;
    for (area, p) in root.split_evenly((1, panels.len())).iter().zip(panels) {
        let mut chart = ChartBuilder::on(area)
            .caption(p.title, ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(36)
            .build_cartesian_2d(0..p.rows as i32, 0..p.cols as i32)
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .disable_mesh()
            .x_desc("frame")
            .y_desc("bin")
            .label_style(("sans-serif", 12))
            .draw()
            .map_err(|e| err(&e))?;
        let cells = (0..p.rows).flat_map(|r| (0..p.cols).map(move |c| (r, c)));
        chart
            .draw_series(cells.map(|(r, c)| {
                let v = p.values[r * p.cols + c];
                let t = if v.is_finite() {
                    ((v - lo) / span).clamp(0.0, 1.0)
                } else {
                    0.0
                };
                let color = viridis(t);
                Rectangle::new(
                    [(r as i32, c as i32), (r as i32 + 1, c as i32 + 1)],
                    color.filled(),
                )
            }))
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_heatmaps() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.png");
        let v: Vec<f32> = (0..12).map(|i| i as f32).collect();
        let panel = Heatmap {
            title: "a",
            values: &v,
            rows: 4,
            cols: 3,
        };
        heatmaps(&path, "t", &[panel, panel]).unwrap();
        assert_eq!(&std::fs::read(&path).unwrap()[..4], b"\x89PNG");
        let bad = Heatmap {
            title: "b",
            values: &v,
            rows: 5,
            cols: 3,
        };
        assert!(heatmaps(&path, "t", &[bad]).is_err());
    }

    #[test]
    fn writes_a_png() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.png");
        let s = Series {
            name: "acc".into(),
            points: vec![(0.0, 0.1), (1.0, 0.5), (2.0, 0.7)],
        };
        line_plot(&path, "t", "round", "accuracy", &[s]).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        assert!(line_plot(&path, "t", "x", "y", &[]).is_err());
    }
}
