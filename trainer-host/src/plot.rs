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
        .caption(title, ("sans-serif", 22))
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

#[cfg(test)]
mod tests {
    use super::*;

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
