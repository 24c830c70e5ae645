//! The report's charts, drawn with plotters' SVG backend into strings.
//!
//! Each function returns one complete `<svg>` element. The legend sits in a
//! strip above the plot rather than inside it, so it can never cover data
//! whatever shape the data takes.

use analysis::load::LoadReport;
use analysis::plan::PlanRow;
use plotters::chart::MeshStyle;
use plotters::coord::Shift;
use plotters::coord::ranged1d::ValueFormatter;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::ReportError;
use crate::html::{load as fmt_load, percent};

/// Chart width in SVG user units; the page scales it to the column width.
const WIDTH: u32 = 900;
/// Height of the plot itself, below the legend strip.
const PLOT_HEIGHT: u32 = 420;

/// Okabe–Ito colours, distinguishable with the common colour-vision
/// deficiencies.
const BLUE: RGBColor = RGBColor(0, 114, 178);
const VERMILLION: RGBColor = RGBColor(213, 94, 0);
const ORANGE: RGBColor = RGBColor(230, 159, 0);
const GREEN: RGBColor = RGBColor(0, 158, 115);
const GRID: RGBColor = RGBColor(225, 225, 225);

const FONT: &str = "sans-serif";
/// Plotters writes `size / 1.24` as the SVG font size, so 18 is ~14.5 px.
const LEGEND_FONT: u32 = 18;
const LABEL_FONT: u32 = 17;
const AXIS_FONT: u32 = 18;

/// Space around the plot and for the axes, shared by every chart so that
/// their plot areas line up on the page.
const MARGIN: u32 = 20;
const X_LABEL_AREA: u32 = 56;
const Y_LABEL_AREA: u32 = 84;

/// At most this many shard labels, so wide fleets do not print a solid bar
/// of digits; plotters then picks round steps (0, 50, 100, …).
const MAX_X_LABELS: usize = 20;

/// Turns a plotters error into the report's error, naming the chart.
fn failed<E: std::fmt::Display>(chart: &'static str) -> impl Fn(E) -> ReportError {
    move |error| ReportError::Chart {
        chart,
        message: error.to_string(),
    }
}

/// How a legend entry is drawn.
#[derive(Debug, Clone, Copy)]
enum Swatch {
    /// A line, solid or dashed.
    Line {
        color: RGBAColor,
        width: u32,
        dashed: bool,
    },
    /// A filled box, for bars.
    Bar(RGBColor),
}

/// One legend entry.
struct Entry {
    label: String,
    swatch: Swatch,
}

impl Entry {
    /// A solid line: a data series.
    fn solid(label: impl Into<String>, color: RGBAColor, width: u32) -> Self {
        Self::line(label, color, width, false)
    }

    /// A dashed line: a budget, a mean or a marker drawn over the data.
    fn dashed(label: impl Into<String>, color: RGBAColor, width: u32) -> Self {
        Self::line(label, color, width, true)
    }

    fn line(label: impl Into<String>, color: RGBAColor, width: u32, dashed: bool) -> Self {
        Self {
            label: label.into(),
            swatch: Swatch::Line {
                color,
                width,
                dashed,
            },
        }
    }

    /// A filled box: a bar series.
    fn bar(label: impl Into<String>, color: RGBColor) -> Self {
        Self {
            label: label.into(),
            swatch: Swatch::Bar(color),
        }
    }
}

/// Legend layout constants, in SVG user units.
const SWATCH_WIDTH: i32 = 28;
const SWATCH_GAP: i32 = 8;
const ENTRY_GAP: i32 = 30;
const LEGEND_ROW: i32 = 26;

/// The width a label will take. The SVG backend cannot measure text, so this
/// estimates generously (0.62 em per character, wider than DejaVu Sans and
/// Liberation Sans on average) to keep entries from touching.
fn label_width(label: &str) -> i32 {
    let em = f64::from(LEGEND_FONT) / 1.24;
    (label.chars().count() as f64 * em * 0.62).ceil() as i32
}

/// Lays the entries out left to right from the plot's left edge, wrapping
/// to a new row when one would overflow; returns each entry's top-left
/// corner and the number of rows.
fn legend_layout(entries: &[Entry]) -> (Vec<(i32, i32)>, i32) {
    let left = (MARGIN + Y_LABEL_AREA) as i32;
    let right = (WIDTH - MARGIN) as i32;
    let mut at = Vec::with_capacity(entries.len());
    let (mut x, mut row) = (left, 0);
    for entry in entries {
        let width = SWATCH_WIDTH + SWATCH_GAP + label_width(&entry.label);
        if x > left && x + width > right {
            x = left;
            row += 1;
        }
        at.push((x, row * LEGEND_ROW));
        x += width + ENTRY_GAP;
    }
    (at, if entries.is_empty() { 0 } else { row + 1 })
}

/// Draws a chart with a legend strip on top into a fresh SVG string. `plot`
/// draws into the area below the strip.
fn svg(
    chart: &'static str,
    entries: &[Entry],
    plot: impl FnOnce(&DrawingArea<SVGBackend<'_>, Shift>) -> Result<(), ReportError>,
) -> Result<String, ReportError> {
    let (at, rows) = legend_layout(entries);
    let strip = (MARGIN as i32 + rows * LEGEND_ROW) as u32;
    let mut out = String::new();
    {
        let root =
            SVGBackend::with_string(&mut out, (WIDTH, strip + PLOT_HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(failed(chart))?;
        let (legend, rest) = root.split_vertically(strip);
        let style = TextStyle::from((FONT, LEGEND_FONT).into_font())
            .pos(Pos::new(HPos::Left, VPos::Center));
        for (entry, &(x, y)) in entries.iter().zip(&at) {
            // Centre of the row, below the top margin.
            let mid = MARGIN as i32 + y + LEGEND_ROW / 2 - 2;
            match entry.swatch {
                Swatch::Line {
                    color,
                    width,
                    dashed,
                } => {
                    let style = color.stroke_width(width);
                    let pieces: &[(i32, i32)] = if dashed {
                        &[(0, 10), (16, SWATCH_WIDTH)]
                    } else {
                        &[(0, SWATCH_WIDTH)]
                    };
                    for &(from, to) in pieces {
                        legend
                            .draw(&PathElement::new([(x + from, mid), (x + to, mid)], style))
                            .map_err(failed(chart))?;
                    }
                }
                Swatch::Bar(color) => legend
                    .draw(&Rectangle::new(
                        [(x + 4, mid - 8), (x + SWATCH_WIDTH - 4, mid + 8)],
                        color.filled(),
                    ))
                    .map_err(failed(chart))?,
            }
            legend
                .draw(&Text::new(
                    entry.label.clone(),
                    (x + SWATCH_WIDTH + SWATCH_GAP, mid),
                    style.clone(),
                ))
                .map_err(failed(chart))?;
        }
        plot(&rest)?;
        root.present().map_err(failed(chart))?;
    }
    Ok(out)
}

/// A chart builder in the layout every chart shares (see [`MARGIN`]), so
/// that the plot areas line up on the page.
fn chart_on<'a, 'b, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
) -> ChartBuilder<'a, 'b, DB> {
    let mut builder = ChartBuilder::on(area);
    builder
        .margin(MARGIN)
        .x_label_area_size(X_LABEL_AREA)
        .y_label_area_size(Y_LABEL_AREA);
    builder
}

/// Draws the axes and grid in the style every chart shares, once `mesh`
/// holds what differs per chart (label counts, descriptions, formatters).
fn draw_mesh<X, Y, DB>(
    mesh: &mut MeshStyle<'_, '_, X, Y, DB>,
    chart: &'static str,
) -> Result<(), ReportError>
where
    X: Ranged + ValueFormatter<X::ValueType>,
    Y: Ranged + ValueFormatter<Y::ValueType>,
    DB: DrawingBackend,
{
    mesh.disable_x_mesh()
        .light_line_style(WHITE)
        .bold_line_style(GRID)
        .label_style((FONT, LABEL_FONT))
        .axis_desc_style((FONT, AXIS_FONT))
        .draw()
        .map_err(failed(chart))
}

/// Axes for one bar per whole number in `0..bars` (at most `x_labels` of
/// them labelled) over a linear value axis from 0 to `y_top`, drawn in the
/// shared style; `descriptions` are the x and y axis titles.
fn bar_axes<'a, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    chart: &'static str,
    bars: usize,
    x_labels: usize,
    (x_desc, y_desc): (&str, &str),
    y_top: f64,
) -> Result<ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>, ReportError> {
    let mut axes = chart_on(area)
        .build_cartesian_2d(-0.5..bars as f64 - 0.5, 0.0..y_top)
        .map_err(failed(chart))?;
    draw_mesh(
        axes.configure_mesh()
            .x_labels(x_labels)
            .x_desc(x_desc)
            .y_desc(y_desc)
            .x_label_formatter(&integer_label)
            .y_label_formatter(&tick_label),
        chart,
    )?;
    Ok(axes)
}

/// The top of a linear value axis: some headroom above the largest value,
/// and a non-empty range when every value is zero.
fn axis_top(largest: f64) -> f64 {
    if largest > 0.0 { largest * 1.1 } else { 1.0 }
}

/// Labels whole numbers only: the category axes (k, shared shards, shard
/// index) have no meaning between integers.
fn integer_label(value: &f64) -> String {
    if (value - value.round()).abs() < 1e-9 {
        format!("{}", value.round() as i64)
    } else {
        String::new()
    }
}

/// A tick value without trailing zeros: 70 rather than 70.0, 0.001 rather
/// than 0.0010000000000000002.
fn tick_label(value: &f64) -> String {
    let text = format!("{value:.6}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" { "0" } else { text }.to_owned()
}

/// The bottom of the logarithmic percent axis: a decade below the smallest
/// positive value, as a power of ten. Zeros are drawn on it and it is
/// labelled 0, the usual way to show zero on a log axis.
fn log_floor(values: impl IntoIterator<Item = f64>) -> f64 {
    let smallest = values
        .into_iter()
        .filter(|&v| v > 0.0)
        .fold(f64::INFINITY, f64::min);
    let exponent = if smallest.is_finite() {
        (smallest.log10().floor() as i32 - 1).clamp(-6, 1)
    } else {
        -1
    };
    10f64.powi(exponent)
}

/// Fully down (under the budget's concurrent failures) and degraded (on one
/// failure) against `k`, with the two budgets as dashed lines.
///
/// The axis is logarithmic because the figures that matter span decades: a
/// 0.1 % fully-down budget and a 50 % single-failure blip on one chart.
pub(crate) fn fully_down_and_degraded(
    rows: &[PlanRow],
    max_degraded: f64,
    max_fully_down: f64,
    concurrent_failures: usize,
    recommended: Option<u32>,
    unit: &str,
) -> Result<String, ReportError> {
    const CHART: &str = "fully down and degraded against k";
    let first = rows.first().map_or(1, |row| row.k);
    let last = rows.last().map_or(1, |row| row.k).max(first);
    let x_range = (f64::from(first) - 0.5)..(f64::from(last) + 0.5);
    let all = || {
        rows.iter()
            .flat_map(|row| {
                [
                    row.degraded_one_failure,
                    row.worst_fully_down.unwrap_or(0.0),
                ]
            })
            .chain([max_degraded, max_fully_down])
            .map(|fraction| fraction * 100.0)
    };
    let floor = log_floor(all());
    let largest = all().fold(0.0, f64::max).max(floor * 10.0);
    let top = 10f64.powi(largest.log10().ceil() as i32);
    // Widened by a hair so the floor and top powers of ten survive rounding
    // and become ticks.
    let y_range = (floor * (1.0 - 1e-9))..(top * (1.0 + 1e-9));
    let decades = (top / floor).log10().round() as usize;
    let at_floor = |percent: f64| percent.max(floor);

    let mut entries = vec![
        Entry::solid("degraded by one failure (widest)", BLUE.to_rgba(), 3),
        Entry::solid(
            format!("fully down by {concurrent_failures} failures (worst)"),
            VERMILLION.to_rgba(),
            3,
        ),
        Entry::dashed(
            format!("degraded budget ({})", percent(max_degraded)),
            BLUE.mix(0.7),
            2,
        ),
        Entry::dashed(
            format!("fully-down budget ({})", percent(max_fully_down)),
            VERMILLION.mix(0.7),
            2,
        ),
    ];
    if let Some(k) = recommended {
        entries.push(Entry::dashed(
            format!("recommended k = {k}"),
            GREEN.to_rgba(),
            2,
        ));
    }

    svg(CHART, &entries, |area| {
        let mut chart = chart_on(area)
            .build_cartesian_2d(x_range.clone(), y_range.clone().log_scale())
            .map_err(failed(CHART))?;
        draw_mesh(
            chart
                .configure_mesh()
                .x_labels((last - first + 1) as usize)
                .y_labels(decades + 1)
                .x_desc("k (shards per tenant)")
                .y_desc(format!("% of {unit} (log scale)"))
                .x_label_formatter(&integer_label)
                .y_label_formatter(&|value| {
                    // A log axis has no zero; the bottom line stands for it
                    // and says so, so it cannot be read as the floor's value.
                    if *value <= floor * (1.0 + 1e-6) {
                        "0 (none)".to_owned()
                    } else {
                        tick_label(value)
                    }
                }),
            CHART,
        )?;

        if let Some(k) = recommended {
            let x = f64::from(k);
            chart
                .draw_series(DashedLineSeries::new(
                    [(x, y_range.start), (x, y_range.end)],
                    6,
                    4,
                    GREEN.stroke_width(2),
                ))
                .map_err(failed(CHART))?;
        }
        for (fraction, color) in [(max_degraded, BLUE), (max_fully_down, VERMILLION)] {
            let y = at_floor(fraction * 100.0);
            chart
                .draw_series(DashedLineSeries::new(
                    [(x_range.start, y), (x_range.end, y)],
                    8,
                    5,
                    color.mix(0.7).stroke_width(2),
                ))
                .map_err(failed(CHART))?;
        }

        chart
            .draw_series(
                LineSeries::new(
                    rows.iter()
                        .map(|row| (f64::from(row.k), at_floor(row.degraded_one_failure * 100.0))),
                    BLUE.stroke_width(3),
                )
                .point_size(5),
            )
            .map_err(failed(CHART))?;

        // A `k` whose exact search was too large has no figure: the line
        // breaks there instead of inventing a value.
        let mut segments: Vec<Vec<(f64, f64)>> = vec![Vec::new()];
        for row in rows {
            match row.worst_fully_down {
                Some(fraction) => {
                    if let Some(segment) = segments.last_mut() {
                        segment.push((f64::from(row.k), at_floor(fraction * 100.0)));
                    }
                }
                None => segments.push(Vec::new()),
            }
        }
        for segment in segments.into_iter().filter(|s| !s.is_empty()) {
            chart
                .draw_series(LineSeries::new(segment, VERMILLION.stroke_width(3)).point_size(5))
                .map_err(failed(CHART))?;
        }
        Ok(())
    })
}

/// The share of tenant pairs sharing exactly `j` shards, measured next to
/// the closed-form expectation, as grouped bars.
pub(crate) fn shared_counts(
    measured: &[f64],
    expected: Option<&[f64]>,
) -> Result<String, ReportError> {
    const CHART: &str = "pairs sharing j shards";
    let groups = measured.len().max(expected.map_or(0, <[f64]>::len)).max(1);
    let largest = measured
        .iter()
        .chain(expected.unwrap_or(&[]))
        .fold(0.0, |a: f64, &b| a.max(b))
        * 100.0;
    let y_top = axis_top(largest);
    // Side by side when there is an expectation, one wide bar otherwise.
    let width = if expected.is_some() { 0.38 } else { 0.6 };
    let mut entries = vec![Entry::bar("measured", BLUE)];
    if expected.is_some() {
        entries.push(Entry::bar(
            "expected (independent uniform placement)",
            ORANGE,
        ));
    }
    svg(CHART, &entries, |area| {
        let descriptions = (
            "shards shared by a pair of tenants (j)",
            "% of tenant pairs",
        );
        let mut chart = bar_axes(area, CHART, groups, groups, descriptions, y_top)?;

        let left = if expected.is_some() {
            width
        } else {
            width / 2.0
        };
        chart
            .draw_series(measured.iter().enumerate().map(|(j, &fraction)| {
                let x = j as f64;
                Rectangle::new(
                    [(x - left, 0.0), (x - left + width, fraction * 100.0)],
                    BLUE.filled(),
                )
            }))
            .map_err(failed(CHART))?;
        if let Some(expected) = expected {
            chart
                .draw_series(expected.iter().enumerate().map(|(j, &fraction)| {
                    let x = j as f64;
                    Rectangle::new([(x, 0.0), (x + width, fraction * 100.0)], ORANGE.filled())
                }))
                .map_err(failed(CHART))?;
        }
        Ok(())
    })
}

/// Steady per-shard load as bars, the hottest and over-capacity shards
/// picked out, with the mean as a dashed line.
pub(crate) fn per_shard_load(load: &LoadReport) -> Result<String, ReportError> {
    const CHART: &str = "per-shard load";
    let shards = load.per_shard.len().max(1);
    let largest = load.per_shard.iter().fold(0.0, |a: f64, &b| a.max(b));
    let y_top = axis_top(largest);
    let half = if load.per_shard.len() > 200 { 0.5 } else { 0.4 };
    let entries = [
        Entry::bar("steady load", BLUE),
        Entry::bar(
            if load.over_capacity.is_empty() {
                "hottest shard"
            } else {
                "hottest or over capacity"
            },
            VERMILLION,
        ),
        Entry::dashed(
            format!("mean ({})", fmt_load(load.mean)),
            BLACK.to_rgba(),
            2,
        ),
    ];
    svg(CHART, &entries, |area| {
        let descriptions = ("shard (index)", "load (weight units)");
        let x_labels = shards.min(MAX_X_LABELS);
        let mut chart = bar_axes(area, CHART, shards, x_labels, descriptions, y_top)?;

        let hot = |shard: usize| {
            shard == load.hottest as usize || load.over_capacity.contains(&(shard as u32))
        };
        chart
            .draw_series(load.per_shard.iter().enumerate().map(|(shard, &value)| {
                let x = shard as f64;
                let color = if hot(shard) { VERMILLION } else { BLUE };
                Rectangle::new([(x - half, 0.0), (x + half, value)], color.filled())
            }))
            .map_err(failed(CHART))?;
        chart
            .draw_series(DashedLineSeries::new(
                [(-0.5, load.mean), (shards as f64 - 0.5, load.mean)],
                8,
                5,
                BLACK.stroke_width(2),
            ))
            .map_err(failed(CHART))?;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_whole_numbers_are_labelled() {
        assert_eq!(integer_label(&3.0), "3");
        assert_eq!(integer_label(&2.5), "");
    }

    #[test]
    fn ticks_drop_trailing_zeros_and_rounding_noise() {
        assert_eq!(tick_label(&70.0), "70");
        assert_eq!(tick_label(&0.001_000_000_000_000_000_2), "0.001");
        assert_eq!(tick_label(&12.5), "12.5");
        assert_eq!(tick_label(&-0.0), "0");
    }

    #[test]
    fn an_all_zero_axis_still_has_a_range() {
        assert_eq!(axis_top(0.0), 1.0);
        assert!((axis_top(10.0) - 11.0).abs() < 1e-12);
    }

    #[test]
    fn the_log_floor_is_a_decade_below_the_smallest_positive_value() {
        assert_eq!(log_floor([0.0, 0.05, 50.0]), 0.001);
        assert_eq!(log_floor([0.1, 20.0]), 0.01);
        assert_eq!(log_floor([0.0]), 0.1);
        assert_eq!(log_floor([1e-12]), 1e-6);
    }

    #[test]
    fn legend_entries_wrap_instead_of_overflowing() {
        let entry = |label: &str| Entry::bar(label, BLUE);
        let (at, rows) = legend_layout(&[entry("short")]);
        assert_eq!((at, rows), (vec![((MARGIN + Y_LABEL_AREA) as i32, 0)], 1));
        let long: Vec<Entry> = (0..6).map(|_| entry(&"x".repeat(30))).collect();
        let (at, rows) = legend_layout(&long);
        assert!(rows > 1);
        for (entry, &(x, _)) in long.iter().zip(&at) {
            let end = x + SWATCH_WIDTH + SWATCH_GAP + label_width(&entry.label);
            assert!(end <= (WIDTH - MARGIN) as i32);
        }
    }
}
