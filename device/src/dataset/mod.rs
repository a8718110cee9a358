//! Dataset readers shared by every trainer: Speech Commands layout (KWS), LibriSpeech
//! layout and JSONL manifests (ASR), with speaker-disjoint splits.
