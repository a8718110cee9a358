//! The workspace's crate layers: every hush crate depends only on hush crates of a lower
//! layer, so dependencies run one way (as in tract's and candle's crate stacks) and an edit
//! rebuilds only the crates above it. Reads the root Cargo.toml's `members` and each
//! member's Cargo.toml; no build metadata needed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The layer of each workspace crate. A crate may depend (normal, dev or build dependency)
/// only on crates of a strictly lower layer; a new crate must be placed here.
const LAYERS: &[(&str, u32)] = &[
    ("hush-models", 0),
    // Kernels hush plugs into tract's graphs (device/tract-ops): tract only.
    ("hush-tract-ops", 0),
    ("hush-device", 1),
    // The C library over hush-device (device/capi): nothing links it but apps.
    ("hush-device-capi", 2),
    ("hush-privacy", 2),
    ("hush-corpus", 2),
    ("hush-plot", 2),
    ("hush-train", 3),
    ("hush-fl", 3),
    ("hush-store", 4),
    ("hush-pate", 4),
    ("hush-audit", 4),
    ("hush-server", 5),
    ("hush-lab", 6),
    ("hush-host", 7),
    ("hush-tests", 8),
];

/// The dependency tables a manifest can hold (also under `[target.'cfg(..)']`).
const DEP_TABLES: &[&str] = &["dependencies", "dev-dependencies", "build-dependencies"];

fn layer(name: &str) -> Option<u32> {
    LAYERS.iter().find(|(n, _)| *n == name).map(|&(_, l)| l)
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the workspace root")
        .to_path_buf()
}

fn read_toml(path: &Path) -> toml::Table {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    text.parse::<toml::Table>()
        .unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()))
}

/// Each workspace member's package name and parsed manifest, by member path.
fn members() -> BTreeMap<String, (String, toml::Table)> {
    let root = workspace_root();
    let manifest = read_toml(&root.join("Cargo.toml"));
    let members = manifest
        .get("workspace")
        .and_then(|w| w.get("members"))
        .and_then(|m| m.as_array())
        .expect("root Cargo.toml has [workspace] members");
    let mut out = BTreeMap::new();
    for m in members {
        let m = m.as_str().expect("a member is a path string");
        assert!(
            !m.contains('*') && !m.contains('?'),
            "workspace member `{m}`: globs are not supported by this test; list crates one by one"
        );
        let toml = read_toml(&root.join(m).join("Cargo.toml"));
        let name = toml
            .get("package")
            .and_then(|p| p.get("name"))
            .and_then(|n| n.as_str())
            .unwrap_or_else(|| panic!("{m}/Cargo.toml has no [package] name"))
            .to_string();
        out.insert(m.to_string(), (name, toml));
    }
    out
}

/// The hush crates a manifest depends on: (table, crate name), following `package = ".."`
/// renames.
fn hush_deps(manifest: &toml::Table) -> Vec<(String, String)> {
    let mut tables: Vec<(String, &toml::Table)> = Vec::new();
    for &t in DEP_TABLES {
        if let Some(deps) = manifest.get(t).and_then(|d| d.as_table()) {
            tables.push((t.to_string(), deps));
        }
    }
    if let Some(targets) = manifest.get("target").and_then(|t| t.as_table()) {
        for (cfg, target) in targets {
            for &t in DEP_TABLES {
                if let Some(deps) = target.get(t).and_then(|d| d.as_table()) {
                    tables.push((format!("target.{cfg}.{t}"), deps));
                }
            }
        }
    }
    let mut out = Vec::new();
    for (table, deps) in tables {
        for (key, spec) in deps {
            let name = spec
                .get("package")
                .and_then(|p| p.as_str())
                .unwrap_or(key)
                .to_string();
            if name.starts_with("hush-") {
                out.push((table.clone(), name));
            }
        }
    }
    out
}

#[test]
fn every_workspace_member_has_a_layer() {
    let missing: Vec<String> = members()
        .into_iter()
        .filter(|(_, (name, _))| layer(name).is_none())
        .map(|(path, (name, _))| format!("{name} ({path})"))
        .collect();
    assert!(
        missing.is_empty(),
        "workspace members missing from the layer table in tests/tests/layering.rs: {}",
        missing.join(", ")
    );
}

#[test]
fn hush_crates_depend_only_on_lower_layers() {
    let mut bad = Vec::new();
    for (path, (name, manifest)) in members() {
        let Some(own) = layer(&name) else {
            continue; // reported by every_workspace_member_has_a_layer
        };
        for (table, dep) in hush_deps(&manifest) {
            match layer(&dep) {
                Some(l) if l < own => {}
                Some(l) => bad.push(format!(
                    "{name} (layer {own}, {path}/Cargo.toml) [{table}] names {dep} (layer {l})"
                )),
                None => bad.push(format!(
                    "{name} ({path}/Cargo.toml) [{table}] names {dep}, which has no layer"
                )),
            }
        }
    }
    assert!(
        bad.is_empty(),
        "dependencies on a crate of the same or a higher layer:\n  {}",
        bad.join("\n  ")
    );
}

#[test]
fn the_layer_check_sees_dependencies() {
    // The check is only as good as its parser: a manifest with an upward edge in each kind
    // of table (and a renamed one) must be caught.
    let manifest: toml::Table = r#"
        [package]
        name = "hush-train"
        [dependencies]
        hush-privacy.workspace = true
        [dev-dependencies]
        lab = { package = "hush-lab", path = "../lab" }
        [target.'cfg(unix)'.build-dependencies]
        hush-fl = { workspace = true }
    "#
    .parse()
    .expect("valid TOML");
    let deps = hush_deps(&manifest);
    let names: Vec<&str> = deps.iter().map(|(_, n)| n.as_str()).collect();
    assert_eq!(names.len(), 3, "{deps:?}");
    for want in ["hush-privacy", "hush-lab", "hush-fl"] {
        assert!(names.contains(&want), "{want} not found in {deps:?}");
    }
}
