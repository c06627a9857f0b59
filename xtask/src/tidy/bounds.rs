//! Every bound lives in its crate's `src/limits.rs`, so that one file lists what a crate limits.
//!
//! What this test counts as a bound: a `const` or `static` whose name has `MAX`, `MIN` or
//! `LIMIT` as one of its `_`-separated words (`LEASES_MAX`, `RSA_BITS_MIN`,
//! `HTTP01_BODY_BYTES_LIMIT`, `MAX_WAIT_MS_MAX`), unless the name's last word is `DEFAULT`: the
//! default of a configurable bound (`HTTP01_BODY_BYTES_MAX_DEFAULT`) is configuration, and stays
//! with the configuration it is the default of. Bounds a standard fixes (RFC 1035's name
//! lengths, X.520's common name) are bounds the crate enforces all the same, and live there
//! too, citing the standard. The name is the test's only handle: name a bound `…_MAX` or
//! `…_MIN`, units before (`SESSION_VISIBILITY_MS_MAX`), as the style asks, and this test keeps it
//! where it belongs; a bound named otherwise (`FORWARD_TIMEOUT`) is not seen.
//!
//! Where: every `.rs` file under `src/` of every workspace member, at any depth of the file (at
//! module level, in an inline module, an `impl` or a function body), except test code: an item
//! under `#[cfg(test)]` (to the end of its block), and a module declared by `#[cfg(test)] mod
//! name;` (its file and everything below it). Tests pick their own numbers, and integration
//! tests (`tests/`) are not scanned.
//!
//! Required: the bound is defined in `src/limits.rs` of the same crate. Where it was, the code
//! imports it (`use crate::limits::NAME;`), or re-exports it when callers name it there.

use std::fs;
use std::path::{Path, PathBuf};

use crate::workspace_root;

/// A bound found outside its crate's `limits.rs`.
#[derive(Debug)]
struct Misplaced {
    file: PathBuf,
    line: usize,
    name: String,
}

/// The name a line defines as a `const` or `static`, if it does.
fn defined_name(line: &str) -> Option<&str> {
    let mut rest = line.trim_start();
    if let Some(after) = rest.strip_prefix("pub") {
        rest = match after.strip_prefix('(') {
            Some(scope) => &scope[scope.find(')')? + 1..],
            None => after,
        };
        rest = rest.trim_start();
    }
    let rest = rest
        .strip_prefix("const ")
        .or_else(|| rest.strip_prefix("static mut "))
        .or_else(|| rest.strip_prefix("static "))?;
    let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))?;
    let name = &rest[..end];
    (rest[end..].trim_start().starts_with(':') && !name.is_empty()).then_some(name)
}

/// Whether `name` names a bound (see the module documentation).
fn is_bound(name: &str) -> bool {
    let words: Vec<&str> = name.split('_').collect();
    words.last() != Some(&"DEFAULT")
        && words
            .iter()
            .any(|word| matches!(*word, "MAX" | "MIN" | "LIMIT"))
}

/// The lines of `text` that are test code (`true`), and the modules it declares as test-only
/// files (`#[cfg(test)] mod name;`).
fn test_code(text: &str) -> (Vec<bool>, Vec<String>) {
    let lines: Vec<&str> = text.lines().collect();
    let mut test = vec![false; lines.len()];
    let mut test_modules = Vec::new();
    let mut at = 0;
    while at < lines.len() {
        if lines[at].trim() != "#[cfg(test)]" {
            at += 1;
            continue;
        }
        let indent = &lines[at][..lines[at].len() - lines[at].trim_start().len()];
        // The item the attribute applies to, past further attributes and comments.
        let mut item = at + 1;
        while item < lines.len() && {
            let line = lines[item].trim_start();
            line.starts_with("#[") || line.starts_with("//")
        } {
            item += 1;
        }
        let Some(first) = lines.get(item).map(|line| line.trim()) else {
            break;
        };
        let end = if first.ends_with(';') || first.ends_with('}') {
            if let Some(name) = first
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub(super) ")
                .trim_start_matches("pub ")
                .strip_prefix("mod ")
                .and_then(|rest| rest.strip_suffix(';'))
            {
                test_modules.push(name.trim().to_owned());
            }
            item
        } else {
            // A block: it ends at the first line that closes at the attribute's indentation.
            let close = format!("{indent}}}");
            (item + 1..lines.len())
                .find(|&line| lines[line].starts_with(&close))
                .unwrap_or(lines.len() - 1)
        };
        for line in &mut test[at..=end] {
            *line = true;
        }
        at = end + 1;
    }
    (test, test_modules)
}

/// Where a file's submodule `name` lives, beside `lib.rs`, `main.rs` and `mod.rs`, else in the
/// folder named after the file: its file, and the folder of its own submodules.
fn module_paths(file: &Path, name: &str) -> [PathBuf; 2] {
    let dir = file.parent().unwrap();
    let stem = file.file_stem().unwrap().to_str().unwrap();
    let base = if matches!(stem, "lib" | "main" | "mod") {
        dir.to_path_buf()
    } else {
        dir.join(stem)
    };
    [base.join(format!("{name}.rs")), base.join(name)]
}

/// Every bound defined outside its crate's `src/limits.rs`.
fn misplaced_bounds() -> Vec<Misplaced> {
    let root = workspace_root();
    let mut misplaced = Vec::new();
    for member in super::members() {
        let src = root.join(&member).join("src");
        if !src.is_dir() {
            continue;
        }
        let files = super::rust_files(&src);
        let texts: Vec<String> = files
            .iter()
            .map(|file| fs::read_to_string(file).unwrap())
            .collect();
        // Test-only module files, and the folders below them (`mod.rs` and submodules).
        let mut test_paths = Vec::new();
        for (file, text) in files.iter().zip(&texts) {
            for name in test_code(text).1 {
                test_paths.extend(module_paths(file, &name));
            }
        }
        let limits = src.join("limits.rs");
        for (file, text) in files.iter().zip(&texts) {
            if *file == limits || test_paths.iter().any(|path| file.starts_with(path)) {
                continue;
            }
            let test = test_code(text).0;
            for (number, line) in text.lines().enumerate() {
                if test[number] {
                    continue;
                }
                if let Some(name) = defined_name(line).filter(|name| is_bound(name)) {
                    misplaced.push(Misplaced {
                        file: file.strip_prefix(&root).unwrap().to_path_buf(),
                        line: number + 1,
                        name: name.to_owned(),
                    });
                }
            }
        }
    }
    misplaced
}

/// Bounds are named and kept together: each crate's `src/limits.rs` holds every bound of the
/// crate (see the module documentation for what a bound is).
#[test]
fn every_bound_lives_in_its_crates_limits_file() {
    let root = workspace_root();
    let found: Vec<String> = misplaced_bounds()
        .iter()
        .map(|bound| {
            let src = bound
                .file
                .ancestors()
                .find(|dir| dir.ends_with("src"))
                .unwrap();
            let limits = src.join("limits.rs");
            let create = if root.join(&limits).exists() {
                String::new()
            } else {
                " (create it, declared `mod limits;` in the crate's root file)".to_owned()
            };
            format!(
                "  {}:{}: {} — move it, with its doc comment, to {}{create}, and `use \
                 crate::limits::{};` where it was",
                bound.file.display(),
                bound.line,
                bound.name,
                limits.display(),
                bound.name,
            )
        })
        .collect();
    assert!(
        found.is_empty(),
        "{} bound(s) live outside their crate's limits.rs. A bound is a const or static with \
         MAX, MIN or LIMIT as a word of its name (not ending in DEFAULT), outside test code; \
         xtask/src/tidy/bounds.rs has the exact rule:\n{}",
        found.len(),
        found.join("\n")
    );
}

#[test]
fn bounds_are_recognized_by_their_names() {
    assert_eq!(
        defined_name("pub const LEASES_MAX: usize = 1;"),
        Some("LEASES_MAX")
    );
    assert_eq!(
        defined_name("    pub(crate) const A_MIN: u64 = 1;"),
        Some("A_MIN")
    );
    assert_eq!(
        defined_name("pub(in crate::x) static B_LIMIT: u8 = 1;"),
        Some("B_LIMIT")
    );
    assert_eq!(defined_name("const fn max() -> u8 {"), None);
    assert_eq!(defined_name("let x_max = 1;"), None);
    assert!(is_bound("MAX_WAIT_MS_MAX") && is_bound("HTTP01_BODY_BYTES_LIMIT"));
    assert!(is_bound("LEADER_CLOCK_MAX_MS"));
    assert!(!is_bound("HTTP01_BODY_BYTES_MAX_DEFAULT"));
    assert!(!is_bound("UNLIMITED_PATH_PREFIXES") && !is_bound("MINUTE_MS"));
}

#[test]
fn test_code_is_told_apart() {
    let text = "\
const A_MAX: u8 = 1;
#[cfg(test)]
mod tests {
    const B_MAX: u8 = 2;
}
#[cfg(test)]
mod more;
#[cfg(test)]
/// A helper.
fn helper(
    x: u8,
) {
    const C_MAX: u8 = 3;
}
const D_MAX: u8 = 4;
";
    let (test, modules) = test_code(text);
    let test_lines: Vec<usize> = (0..test.len()).filter(|&line| test[line]).collect();
    assert_eq!(test_lines, vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]);
    assert_eq!(modules, vec!["more".to_owned()]);
}
