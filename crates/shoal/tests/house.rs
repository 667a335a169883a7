//! The house the documents describe, checked against the code, so that a newcomer
//! who reads them is not misled: the crate diagram in documents/architecture.md
//! against every crate's `Cargo.toml`, and each library's `# Layout` list (its
//! `lib.rs`) against the modules it declares.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The workspace's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every crate under crates/, by its directory name.
fn crates() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(root().join("crates"))
        .unwrap()
        .map(|entry| entry.unwrap())
        .filter(|entry| entry.path().join("Cargo.toml").is_file())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// The shoal crates `name` depends on (`[dependencies]`, not dev or build), without
/// the `shoal_` prefix.
fn dependencies(name: &str) -> BTreeSet<String> {
    let text =
        std::fs::read_to_string(root().join("crates").join(name).join("Cargo.toml")).unwrap();
    let manifest: toml::Table = text.parse().unwrap();
    manifest
        .get("dependencies")
        .and_then(|deps| deps.as_table())
        .map(|deps| {
            deps.keys()
                .filter_map(|key| key.strip_prefix("shoal_"))
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// The crate diagram: the first code block under `## Crates`, one line per crate,
/// `name ──► a, b` or `name ──► (none)`.
fn diagram(markdown: &str) -> Result<BTreeMap<String, BTreeSet<String>>, String> {
    let section = markdown
        .split_once("\n## Crates\n")
        .ok_or("no `## Crates` section")?
        .1;
    let block = section
        .split_once("```\n")
        .and_then(|(_, rest)| rest.split_once("\n```"))
        .ok_or("no code block under `## Crates`")?
        .0;
    let mut crates = BTreeMap::new();
    for line in block.lines().filter(|line| !line.trim().is_empty()) {
        let (name, deps) = line
            .split_once('►')
            .ok_or_else(|| format!("not `name ──► deps`: {line:?}"))?;
        let name = name.trim_end_matches(['─', ' ']).trim().to_owned();
        let deps: BTreeSet<String> = match deps.trim() {
            "(none)" => BTreeSet::new(),
            deps => deps.split(',').map(|dep| dep.trim().to_owned()).collect(),
        };
        if crates.insert(name.clone(), deps).is_some() {
            return Err(format!("{name} has two lines"));
        }
    }
    Ok(crates)
}

#[test]
fn the_crate_diagram_is_what_the_manifests_say() {
    let markdown = std::fs::read_to_string(root().join("documents/architecture.md")).unwrap();
    let drawn = diagram(&markdown).unwrap();
    let mut wrong = Vec::new();
    for name in crates() {
        let real = dependencies(&name);
        match drawn.get(&name) {
            None => wrong.push(format!("{name} is not in the diagram")),
            Some(deps) if *deps != real => wrong.push(format!(
                "{name}: drawn {:?}, Cargo.toml says {:?} (missing {:?}, extra {:?})",
                deps,
                real,
                real.difference(deps).collect::<Vec<_>>(),
                deps.difference(&real).collect::<Vec<_>>(),
            )),
            Some(_) => {}
        }
    }
    for name in drawn.keys() {
        if !crates().contains(name) {
            wrong.push(format!("{name} is drawn but is no crate"));
        }
    }
    assert!(
        wrong.is_empty(),
        "documents/architecture.md:\n{}",
        wrong.join("\n")
    );
}

/// The modules `lib.rs` declares (test-only ones left out), and its `# Layout`
/// section's lines, if it has one.
fn modules_and_layout(lib: &str) -> (BTreeSet<String>, Option<String>) {
    let lines: Vec<&str> = lib.lines().collect();
    let mut modules = BTreeSet::new();
    for (at, line) in lines.iter().enumerate() {
        let line = line.trim();
        let declared = line
            .strip_prefix("pub mod ")
            .or_else(|| line.strip_prefix("pub(crate) mod "))
            .or_else(|| line.strip_prefix("mod "))
            .and_then(|rest| rest.strip_suffix(';'));
        let test_only = at > 0 && lines[at - 1].contains("cfg(test)");
        if let Some(name) = declared
            && !test_only
        {
            modules.insert(name.to_owned());
        }
    }
    let layout = lib.split_once("//! # Layout").map(|(_, rest)| {
        rest.lines()
            .take_while(|line| line.starts_with("//!") || line.is_empty())
            .take_while(|line| !line.starts_with("//! # "))
            .collect::<Vec<_>>()
            .join("\n")
    });
    (modules, layout)
}

/// The module a Layout bullet starts with: `* \`name\`` or `* [\`name\`]`.
fn bullet_module(line: &str) -> Option<&str> {
    let rest = line.strip_prefix("//! * ")?;
    let rest = rest.strip_prefix('[').unwrap_or(rest);
    let rest = rest.strip_prefix('`')?;
    Some(&rest[..rest.find('`')?])
}

#[test]
fn every_layout_list_names_each_module_and_nothing_else() {
    let mut wrong = Vec::new();
    for name in crates() {
        let path = root().join("crates").join(&name).join("src/lib.rs");
        let Ok(lib) = std::fs::read_to_string(&path) else {
            continue;
        };
        let (modules, layout) = modules_and_layout(&lib);
        let Some(layout) = layout else {
            if !modules.is_empty() {
                wrong.push(format!(
                    "{name}: modules {modules:?} and no `# Layout` list"
                ));
            }
            continue;
        };
        for module in &modules {
            if !layout.contains(&format!("`{module}`")) {
                wrong.push(format!(
                    "{name}: module `{module}` is not in its Layout list"
                ));
            }
        }
        for line in layout.lines() {
            if let Some(listed) = bullet_module(line)
                && !modules.contains(listed)
            {
                wrong.push(format!(
                    "{name}: the Layout list names `{listed}`, no module"
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The checks themselves catch what they are for.
#[test]
fn the_checks_see_a_missing_edge_and_a_missing_module() {
    let drawn = diagram("x\n## Crates\n\n```\na ──► b, c\nb ──► (none)\n```\n").unwrap();
    assert_eq!(drawn["a"], BTreeSet::from(["b".to_owned(), "c".to_owned()]));
    assert!(drawn["b"].is_empty());
    assert!(diagram("## Crates\n```\na -> b\n```\n").is_err());
    let (modules, layout) = modules_and_layout(
        "//! # Layout\n//!\n//! * `one`: a.\n//! * [`gone`]: b.\n\nmod one;\npub mod two;\n\
         #[cfg(test)]\nmod tests;\n",
    );
    assert_eq!(
        modules,
        BTreeSet::from(["one".to_owned(), "two".to_owned()])
    );
    let layout = layout.unwrap();
    assert!(!layout.contains("`two`"));
    let bullets: Vec<_> = layout.lines().filter_map(bullet_module).collect();
    assert_eq!(bullets, ["one", "gone"]);
}
