//! The external speech tools the generator runs, and the check that they are installed.

use std::path::{Path, PathBuf};

/// A program or data file the generator needs, with the Debian package that provides it.
pub(crate) struct Requirement {
    pub what: &'static str,
    pub package: &'static str,
    kind: Kind,
}

enum Kind {
    Program,
    Dir(&'static str),
}

/// Everything `corpus synth` needs on the machine.
pub(crate) const REQUIREMENTS: &[Requirement] = &[
    Requirement {
        what: "sox",
        package: "sox",
        kind: Kind::Program,
    },
    Requirement {
        what: "espeak-ng",
        package: "espeak-ng",
        kind: Kind::Program,
    },
    Requirement {
        what: "flite",
        package: "flite",
        kind: Kind::Program,
    },
    Requirement {
        what: "festival",
        package: "festival",
        kind: Kind::Program,
    },
    Requirement {
        what: "festival voice kal_diphone",
        package: "festvox-kallpc16k",
        kind: Kind::Dir("/usr/share/festival/voices/english/kal_diphone"),
    },
    Requirement {
        what: "festival voice ked_diphone",
        package: "festvox-kdlpc16k",
        kind: Kind::Dir("/usr/share/festival/voices/english/ked_diphone"),
    },
    Requirement {
        what: "festival voice cmu_us_slt_arctic_hts",
        package: "festvox-us-slt-hts",
        kind: Kind::Dir("/usr/share/festival/voices/us/cmu_us_slt_arctic_hts"),
    },
];

/// Returns the requirements that are missing on this machine.
pub(crate) fn missing() -> Vec<&'static Requirement> {
    REQUIREMENTS
        .iter()
        .filter(|r| match r.kind {
            Kind::Program => find_program(r.what).is_none(),
            Kind::Dir(d) => !Path::new(d).is_dir(),
        })
        .collect()
}

fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}
