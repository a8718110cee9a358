//! Corpus tools: the synthetic multi-speaker corpus generator, corpus statistics and
//! federated partitioners.
