//! # hush-privacy
//!
//! Privacy accounting on the host: the accountants ([`accountant`]: pure RDP and PLD math
//! apart from the stateful accountant, PATE's data-dependent bounds) and the privacy ledger
//! ([`ledger`]: budgets, releases, the SQLite store).

pub mod accountant;
pub mod ledger;
