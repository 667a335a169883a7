//! The final summary of a run, written once for the three load testers: each says
//! which figures it has ([`Summary::figures`]), and the text for people and the JSON
//! object for scripts are both drawn from that one list, so the two cannot disagree.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use shoal_toml_config::TomlConfig;

use crate::latency::LatencySummary;

/// Format of the final summary.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, TomlConfig)]
#[serde(rename_all = "lowercase")]
pub enum SummaryFormat {
    /// Lines for people.
    #[default]
    Text,
    /// One JSON object on stdout, for scripts.
    Json,
}

/// How a figure is measured, which decides how it is printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// Events per second (text: whole numbers with `/s`; JSON: one decimal).
    PerSecond,
    /// An average of a count (text: one decimal; JSON: three).
    Average,
    /// A share of a whole, 0 to 1 (text: a percentage with two decimals; JSON: the
    /// fraction with six).
    Fraction,
    /// A count at the end of the run (an integer in both).
    Count,
    /// Megabits per second (text: one decimal with `Mbit/s`; JSON: three decimals).
    MegabitsPerSecond,
}

/// One figure of a summary.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Figure {
    /// Its JSON key (scripts read it: renaming one breaks them).
    pub key: &'static str,
    /// Its label for people; two leading spaces make it a part of the figure above.
    pub label: &'static str,
    /// The value.
    pub value: f64,
    /// What the value measures.
    pub unit: Unit,
}

impl Figure {
    /// A figure named `key` in JSON and `label` for people.
    pub fn new(key: &'static str, label: &'static str, value: f64, unit: Unit) -> Self {
        Self {
            key,
            label,
            value,
            unit,
        }
    }

    fn text(&self) -> String {
        let value = self.value;
        match self.unit {
            Unit::PerSecond => format!("{value:>12.0}/s"),
            Unit::Average => format!("{value:>12.1}"),
            Unit::Fraction => format!("{:>12.2} %", value * 100.0),
            Unit::Count => format!("{value:>12.0}"),
            Unit::MegabitsPerSecond => format!("{value:>12.1} Mbit/s"),
        }
    }

    fn json(&self) -> String {
        let value = self.value;
        match self.unit {
            Unit::PerSecond => format!("{value:.1}"),
            Unit::Average | Unit::MegabitsPerSecond => format!("{value:.3}"),
            Unit::Fraction => format!("{value:.6}"),
            Unit::Count => format!("{value:.0}"),
        }
    }
}

/// A summary a load tester prints at the end of a run.
pub trait Summary {
    /// Seconds the summary covers.
    fn seconds(&self) -> f64;
    /// Its figures, in the order people read them.
    fn figures(&self) -> Vec<Figure>;
    /// Response latency over the same stretch.
    fn latency(&self) -> &LatencySummary;

    /// Lines for people.
    fn text(&self) -> String {
        let mut out = format!("summary over the last {:.0} s:\n", self.seconds());
        for figure in self.figures() {
            let _ = writeln!(out, "  {:<22}{}", figure.label, figure.text());
        }
        out.push_str(&self.latency().text());
        out
    }

    /// One JSON object: `seconds`, every figure by its key, and `latency_us`.
    fn json(&self) -> String {
        let mut out = format!("{{\"seconds\":{:.3}", self.seconds());
        for figure in self.figures() {
            let _ = write!(out, ",\"{}\":{}", figure.key, figure.json());
        }
        let _ = write!(out, ",{}}}", self.latency().json());
        out
    }
}

/// Prints `summary` to stdout in `format`.
#[allow(clippy::print_stdout)] // the summary is the output
pub(crate) fn print_summary(format: SummaryFormat, summary: &impl Summary) {
    match format {
        SummaryFormat::Text => print!("{}", summary.text()),
        SummaryFormat::Json => println!("{}", summary.json()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Example {
        latency: LatencySummary,
    }

    impl Summary for Example {
        fn seconds(&self) -> f64 {
            10.0
        }

        fn figures(&self) -> Vec<Figure> {
            vec![
                Figure::new("replies_per_second", "replies", 1234.56, Unit::PerSecond),
                Figure::new(
                    "announce_per_second",
                    "  announce",
                    1000.04,
                    Unit::PerSecond,
                ),
                Figure::new(
                    "peers_per_announce",
                    "peers per announce",
                    3.25,
                    Unit::Average,
                ),
                Figure::new("unanswered", "unanswered", 0.0125, Unit::Fraction),
                Figure::new("open_connections", "open at the end", 42.0, Unit::Count),
                Figure::new(
                    "megabits_sent_per_second",
                    "sent",
                    1.5,
                    Unit::MegabitsPerSecond,
                ),
            ]
        }

        fn latency(&self) -> &LatencySummary {
            &self.latency
        }
    }

    #[test]
    fn json_holds_every_figure_by_its_key_and_parses() {
        let example = Example {
            latency: LatencySummary::default(),
        };
        let json: serde_json::Value = serde_json::from_str(&example.json()).unwrap();
        assert_eq!(json["seconds"], 10.0);
        assert_eq!(json["replies_per_second"], 1234.6);
        assert_eq!(json["announce_per_second"], 1000.0);
        assert_eq!(json["peers_per_announce"], 3.25);
        assert_eq!(json["unanswered"], 0.0125);
        assert_eq!(json["open_connections"], 42);
        assert_eq!(json["megabits_sent_per_second"], 1.5);
        assert!(json["latency_us"].is_object());
    }

    #[test]
    fn text_lines_up_labels_values_and_units() {
        let example = Example {
            latency: LatencySummary::default(),
        };
        let text = example.text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "summary over the last 10 s:");
        assert_eq!(lines[1], "  replies                       1235/s");
        assert_eq!(lines[2], "    announce                    1000/s");
        assert_eq!(lines[4], "  unanswered                    1.25 %");
        assert_eq!(lines[6], "  sent                           1.5 Mbit/s");
        assert!(lines[7].contains("latency"));
    }
}
