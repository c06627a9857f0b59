//! The code map in `docs/architecture.md` names every Rust file of the repository, and names only
//! files that exist.
//!
//! Every `.rs` file counts (crates' sources, tests, build scripts, the simulation, xtask, the
//! fuzz wrappers), except under hidden folders and build output (folders named `target…`).
//!
//! How the map names a file (the rule these tests read, written the way the map already is):
//!
//! - The map is the `## Code map` part of the doc. Each `###` heading under it names in
//!   backticks the folders it maps (`` ### `crates/node/` ``, `` ### `proto/` and
//!   `crates/proto/` ``). A file is mapped in the section whose heading names its folder:
//!   `crates/<name>/` for a file of a crate, else its top-level folder (`sim/`, `tests/`,
//!   `fuzz/`, `xtask/`).
//! - In that section, a path in backticks ending in `.rs` names a file. It is read from, in
//!   order: the folder its paragraph or bullet is in (below), the heading folder's `src/`, the
//!   heading folder, the workspace root. The first of these where the file exists is the file it
//!   names: `src/time.rs` and `time.rs` both name `crates/core/src/time.rs` in `crates/core/`'s
//!   section, and `tests/suite.rs` names `crates/store/tests/suite.rs` in `crates/store/`'s.
//! - A paragraph that starts with a folder in backticks (`` `src/raft/` — Raft as … ``) puts its
//!   own text and the bullets below it, up to the next paragraph, in that folder; a bullet that
//!   starts with one (`` - `src/leases/` — `workload.rs`: … ``) puts only itself there. Such a
//!   folder is itself read as a path is, the paragraph's folder first for a bullet's.
//! - `` every file in `F/` `` (or `` Every file in `F/` ``) names every `.rs` file directly in
//!   folder `F/` (not those of its subfolders), `F/` being read as a path is. It is for a folder
//!   whose files all do one thing, such as the fuzz targets' libFuzzer wrappers. A folder named
//!   any other way names none of its files.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use crate::workspace_root;

/// One `###` section of the code map.
#[derive(Debug)]
struct Section {
    /// The heading line, as written.
    heading: String,
    /// The folders the heading names, relative to the root, each ending in `/`.
    folders: Vec<String>,
    blocks: Vec<Block>,
}

/// A paragraph or a bullet (with its continuation lines), its lines joined by spaces.
#[derive(Debug)]
struct Block {
    bullet: bool,
    text: String,
}

/// What the code map names, resolved against the files that exist.
#[derive(Debug, Default)]
struct Named {
    /// Files named, with the folders of the section that names them: (folder, file), both
    /// relative to the root.
    files: BTreeSet<(String, String)>,
    /// Paths that name nothing: (heading, path as written).
    stale: Vec<(String, String)>,
}

/// The `### ` sections under `## Code map`.
fn sections(doc: &str) -> Vec<Section> {
    let mut sections: Vec<Section> = Vec::new();
    let mut in_map = false;
    let mut open = false;
    for line in doc.lines() {
        if let Some(title) = line.strip_prefix("## ") {
            in_map = title.trim() == "Code map";
            continue;
        }
        if !in_map {
            continue;
        }
        if line.starts_with("### ") {
            let folders = code_spans(line)
                .into_iter()
                .filter(|span| span.ends_with('/'))
                .map(str::to_owned)
                .collect();
            sections.push(Section {
                heading: line.to_owned(),
                folders,
                blocks: Vec::new(),
            });
            open = false;
            continue;
        }
        let Some(section) = sections.last_mut() else {
            continue;
        };
        if line.trim().is_empty() {
            open = false;
        } else if let Some(item) = line.strip_prefix("- ") {
            section.blocks.push(Block {
                bullet: true,
                text: item.trim().to_owned(),
            });
            open = true;
        } else if open && (line.starts_with(' ') || !section.blocks.last().unwrap().bullet) {
            let block = section.blocks.last_mut().unwrap();
            block.text.push(' ');
            block.text.push_str(line.trim());
        } else {
            section.blocks.push(Block {
                bullet: false,
                text: line.trim().to_owned(),
            });
            open = true;
        }
    }
    sections
}

/// The text between backticks.
fn code_spans(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// `path` read from each of `bases` in turn: the first that exists (a folder when `folder`),
/// relative to the root.
fn resolve(root: &Path, bases: &[String], path: &str, folder: bool) -> Option<String> {
    bases.iter().find_map(|base| {
        let relative = format!("{base}{path}");
        let full = root.join(&relative);
        let exists = if folder {
            full.is_dir()
        } else {
            full.is_file()
        };
        exists.then_some(relative)
    })
}

/// The folder a block starts with, if it starts with one in backticks.
fn leading_folder(text: &str) -> Option<&str> {
    let rest = text.strip_prefix('`')?;
    let span = &rest[..rest.find('`')?];
    span.ends_with('/').then_some(span)
}

/// Everything the code map names.
fn named(root: &Path, doc: &str) -> Named {
    let mut named = Named::default();
    for section in sections(doc) {
        let mut files = BTreeSet::new();
        let mut section_bases: Vec<String> = Vec::new();
        for folder in &section.folders {
            section_bases.push(format!("{folder}src/"));
            section_bases.push(folder.clone());
        }
        section_bases.push(String::new());
        let mut paragraph_folder: Option<String> = None;
        for block in &section.blocks {
            if !block.bullet {
                paragraph_folder = None;
            }
            let outer: Vec<String> = paragraph_folder
                .iter()
                .chain(&section_bases)
                .cloned()
                .collect();
            let leading = leading_folder(&block.text).and_then(|folder| {
                let found = resolve(root, &outer, folder, true);
                if found.is_none() {
                    named
                        .stale
                        .push((section.heading.clone(), folder.to_owned()));
                }
                found
            });
            if !block.bullet {
                paragraph_folder.clone_from(&leading);
            }
            let bases: Vec<String> = leading.iter().chain(&outer).cloned().collect();
            for span in code_spans(&block.text) {
                if span.ends_with(".rs") && !span.contains(char::is_whitespace) {
                    match resolve(root, &bases, span, false) {
                        Some(file) => {
                            files.insert(file);
                        }
                        None => named.stale.push((section.heading.clone(), span.to_owned())),
                    }
                }
            }
            let lowercase = block.text.replace("Every file in `", "every file in `");
            for (at, _) in lowercase.match_indices("every file in `") {
                let rest = &lowercase[at + "every file in `".len()..];
                let Some(span) = rest.split('`').next() else {
                    continue;
                };
                let Some(dir) = resolve(root, &bases, span, true) else {
                    named.stale.push((section.heading.clone(), span.to_owned()));
                    continue;
                };
                for file in super::rust_files(&root.join(&dir)) {
                    if file.parent() == Some(root.join(&dir).as_path()) {
                        files.insert(relative(root, &file));
                    }
                }
            }
        }
        for folder in &section.folders {
            for file in &files {
                named.files.insert((folder.clone(), file.clone()));
            }
        }
    }
    named
}

fn relative(root: &Path, file: &Path) -> String {
    file.strip_prefix(root)
        .unwrap()
        .to_str()
        .unwrap()
        .replace('\\', "/")
}

/// Every `.rs` file of the repository (hidden folders and build output aside), relative to the
/// root, with the folder it is mapped under (`crates/<name>/`, or its top-level folder).
fn source_files(root: &Path) -> Vec<(String, String)> {
    let mut files = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy();
            if path.is_dir() {
                if !name.starts_with('.') && !name.starts_with("target") {
                    pending.push(path);
                }
            } else if name.ends_with(".rs") {
                let file = relative(root, &path);
                let mut parts = file.split('/');
                let top = parts.next().unwrap();
                let owner = match (top, parts.next()) {
                    ("crates", Some(krate)) => format!("crates/{krate}/"),
                    _ => format!("{top}/"),
                };
                files.push((owner, file));
            }
        }
    }
    files.sort();
    files
}

/// The code map names every Rust file, in the section of its crate or folder.
#[test]
fn the_code_map_names_every_source_file() {
    let root = workspace_root();
    let doc = fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    let named = named(&root, &doc);
    let owners: BTreeSet<String> = sections(&doc)
        .into_iter()
        .flat_map(|section| section.folders)
        .collect();
    let mut missing = Vec::new();
    for (owner, file) in source_files(&root) {
        if named.files.contains(&(owner.clone(), file.clone())) {
            continue;
        }
        let hint = if owners.contains(&owner) {
            let from_owner = file.strip_prefix(&owner).unwrap_or(&file);
            format!("in the `{owner}` section, as `{from_owner}`")
        } else {
            format!("no `###` heading names `{owner}`: add a section for it")
        };
        missing.push(format!("  {file} — {hint}"));
    }
    assert!(
        missing.is_empty(),
        "docs/architecture.md's code map does not name {} file(s). Give each a line saying what it \
         does, in the section of its crate or folder, by its path from that folder (`src/x.rs`) or \
         from the folder its paragraph or bullet starts with (`src/raft/` — then `types.rs`); \
         xtask/src/tidy/code_map.rs has the exact rule:\n{}",
        missing.len(),
        missing.join("\n")
    );
}

/// Every path the code map gives is a file or folder that exists, so the map cannot keep a file
/// that was moved or removed.
#[test]
fn the_code_map_names_only_files_that_exist() {
    let root = workspace_root();
    let doc = fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    let stale: Vec<String> = named(&root, &doc)
        .stale
        .into_iter()
        .map(|(heading, path)| format!("  `{path}` under {heading}"))
        .collect();
    assert!(
        stale.is_empty(),
        "docs/architecture.md's code map names {} path(s) that exist nowhere it looks (the folder \
         its paragraph or bullet starts with, the section's folder and its `src/`, the workspace \
         root). Correct each path, or write it from one of those folders; \
         xtask/src/tidy/code_map.rs has the exact rule:\n{}",
        stale.len(),
        stale.join("\n")
    );
}

/// The rule on a small tree: paths from the crate, from `src/`, from a paragraph's or a bullet's
/// folder, a folder's every file, and paths that name nothing.
#[test]
fn paths_are_read_from_the_folders_the_map_puts_them_in() {
    let root = std::env::temp_dir().join(format!("xtask-code-map-{}", std::process::id()));
    for file in [
        "crates/a/src/lib.rs",
        "crates/a/src/run.rs",
        "crates/a/src/x/run.rs",
        "crates/a/src/x/y.rs",
        "crates/a/tests/t.rs",
        "fuzz/w/one.rs",
        "fuzz/w/two.rs",
        "fuzz/w/deeper/three.rs",
    ] {
        let path = root.join(file);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, "").unwrap();
    }
    let doc = "\
## Code map

### `crates/a/` and `fuzz/`

- `src/lib.rs` — the crate; `tests/t.rs` its test.

`src/x/` — a folder:

- `run.rs` — read in the paragraph's folder, so the crate's own `run.rs` stays unnamed.

Every file in `w/` is read from the heading's `fuzz/`, but not the files below `w/deeper/`.

- `gone.rs` names nothing, nor does every file in `nowhere/`.

## Elsewhere

- `src/run.rs` is outside the map.
";
    let named = named(&root, doc);
    fs::remove_dir_all(&root).unwrap();
    let files: BTreeSet<&str> = named
        .files
        .iter()
        .filter(|(folder, _)| folder == "crates/a/")
        .map(|(_, file)| file.as_str())
        .collect();
    let expected = BTreeSet::from([
        "crates/a/src/lib.rs",
        "crates/a/tests/t.rs",
        "crates/a/src/x/run.rs",
        "fuzz/w/one.rs",
        "fuzz/w/two.rs",
    ]);
    assert_eq!(files, expected);
    assert!(
        named
            .files
            .contains(&("fuzz/".to_owned(), "fuzz/w/one.rs".to_owned()))
    );
    let stale: Vec<&str> = named.stale.iter().map(|(_, path)| path.as_str()).collect();
    assert_eq!(stale, ["gone.rs", "nowhere/"]);
}
