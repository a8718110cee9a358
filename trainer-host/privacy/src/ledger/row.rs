//! The ledger's row format, the same in every database that keeps a `releases` table
//! (SQLite here, PostgreSQL in `hush-store`): [`LedgerRow`] holds a release's columns as
//! the database stores them, and converts to and from a [`ReleaseRecord`].
//!
//! Enum columns hold their snake_case names. A release's [`AdditionalCost`] is text,
//! `delta=<δ spent>;rdp=<order>:<rdp>,<order>:<rdp>,…`, every number in Rust's shortest
//! round-trip form so that it reads back bit for bit (NULL when there is no such cost). A row
//! that does not decode is [`LedgerError::Corrupt`], never a panic.

use super::{LedgerError, Release, ReleaseRecord};
use crate::accountant::{validate, AdditionalCost, SubsampledGaussian};

/// The columns of `releases` after `id`, in [`LedgerRow`]'s order.
pub const COLUMNS: &str = "recorded_at_ms, mechanism, sampling, sampling_rate, \
     noise_multiplier, steps, unit, adjacency, population, delta, epsilon_rdp, epsilon_pld, \
     released, additional_cost";

/// One row of `releases`, as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct LedgerRow {
    /// Row id (0 before the database assigns one).
    pub id: i64,
    /// Unix time in milliseconds.
    pub recorded_at_ms: i64,
    /// [`super::Mechanism`], snake_case.
    pub mechanism: String,
    /// [`crate::accountant::Sampling`], snake_case.
    pub sampling: String,
    /// Sampling rate q.
    pub sampling_rate: f64,
    /// Noise multiplier.
    pub noise_multiplier: f64,
    /// Steps (< 2^63).
    pub steps: i64,
    /// [`crate::accountant::PrivacyUnit`], snake_case.
    pub unit: String,
    /// [`crate::accountant::Adjacency`], snake_case.
    pub adjacency: String,
    /// Population, when known (< 2^63).
    pub population: Option<i64>,
    /// δ of the record's own ε.
    pub delta: f64,
    /// ε of this release by RDP.
    pub epsilon_rdp: Option<f64>,
    /// ε of this release by PLD.
    pub epsilon_pld: Option<f64>,
    /// What was released.
    pub released: String,
    /// The additional cost's text, or `None`.
    pub additional_cost: Option<String>,
}

fn enum_text<T: serde::Serialize + std::fmt::Debug>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        _ => format!("{v:?}"),
    }
}

fn parse_enum<T: serde::de::DeserializeOwned>(
    id: i64,
    column: &'static str,
    s: String,
) -> Result<T, LedgerError> {
    serde_json::from_value(serde_json::Value::String(s.clone())).map_err(|_| LedgerError::Corrupt {
        id,
        column,
        value: s,
    })
}

/// `delta=<δ>;rdp=<order>:<rdp>,…` (each number exact: Rust prints the shortest text that
/// parses back to the same `f64`).
fn encode_additional(cost: &AdditionalCost) -> String {
    let rdp: Vec<String> = cost
        .rdp
        .iter()
        .map(|(o, r)| format!("{o:?}:{r:?}"))
        .collect();
    format!("delta={:?};rdp={}", cost.delta, rdp.join(","))
}

fn decode_additional(text: &str) -> Result<AdditionalCost, String> {
    let number = |s: &str| {
        s.parse::<f64>()
            .map_err(|_| format!("{s:?} is not a number"))
    };
    let (delta, rdp) = text
        .strip_prefix("delta=")
        .and_then(|rest| rest.split_once(";rdp="))
        .ok_or("expected delta=<number>;rdp=<order>:<rdp>,...")?;
    let rdp = rdp
        .split(',')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (o, r) = pair
                .split_once(':')
                .ok_or_else(|| format!("{pair:?} is not <order>:<rdp>"))?;
            Ok((number(o)?, number(r)?))
        })
        .collect::<Result<Vec<_>, String>>()?;
    AdditionalCost {
        rdp,
        delta: number(delta)?,
    }
    .validated()
    .map_err(|e| e.to_string())
}

fn below_2_63(what: &'static str, v: u64) -> Result<i64, LedgerError> {
    i64::try_from(v).map_err(|_| LedgerError::Accountant(validate::invalid(what, v, "below 2^63")))
}

impl LedgerRow {
    /// The row that records `release` at `now_ms` (id 0: the database assigns it).
    pub fn encode(
        release: &Release,
        epsilon_rdp: Option<f64>,
        epsilon_pld: Option<f64>,
        now_ms: i64,
    ) -> Result<Self, LedgerError> {
        Ok(Self {
            id: 0,
            recorded_at_ms: now_ms,
            mechanism: enum_text(&release.mechanism),
            sampling: enum_text(&release.event.sampling),
            sampling_rate: release.event.sampling_rate,
            noise_multiplier: release.event.noise_multiplier,
            steps: below_2_63("steps", release.event.steps)?,
            unit: enum_text(&release.unit),
            adjacency: enum_text(&release.adjacency),
            population: release
                .population
                .map(|p| below_2_63("population", p))
                .transpose()?,
            delta: release.delta,
            epsilon_rdp,
            epsilon_pld,
            released: release.released.clone(),
            additional_cost: (!release.additional.is_none())
                .then(|| encode_additional(&release.additional)),
        })
    }

    /// The record this row holds, or [`LedgerError::Corrupt`] naming the column that does
    /// not decode.
    pub fn decode(self) -> Result<ReleaseRecord, LedgerError> {
        let id = self.id;
        let corrupt = |column, value: String| LedgerError::Corrupt { id, column, value };
        let additional = match self.additional_cost {
            None => AdditionalCost::none(),
            Some(text) => decode_additional(&text)
                .map_err(|e| corrupt("additional_cost", format!("{text} ({e})")))?,
        };
        let steps =
            u64::try_from(self.steps).map_err(|_| corrupt("steps", self.steps.to_string()))?;
        let population = self
            .population
            .map(|p| u64::try_from(p).map_err(|_| corrupt("population", p.to_string())))
            .transpose()?;
        let event = SubsampledGaussian {
            sampling: parse_enum(id, "sampling", self.sampling)?,
            sampling_rate: self.sampling_rate,
            noise_multiplier: self.noise_multiplier,
            steps,
        }
        .validated()
        .map_err(|e| corrupt("sampling_rate/noise_multiplier/steps", e.to_string()))?;
        Ok(ReleaseRecord {
            id,
            recorded_at_ms: self.recorded_at_ms,
            release: Release {
                mechanism: parse_enum(id, "mechanism", self.mechanism)?,
                event,
                unit: parse_enum(id, "unit", self.unit)?,
                adjacency: parse_enum(id, "adjacency", self.adjacency)?,
                population,
                delta: self.delta,
                released: self.released,
                additional,
            },
            epsilon_rdp: self.epsilon_rdp,
            epsilon_pld: self.epsilon_pld,
        })
    }
}
