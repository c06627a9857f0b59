//! No module imports a module that imports it back, directly or through others: each crate's
//! modules form a layered graph, so a module can be read (and moved) without the modules that
//! use it.
//!
//! What counts as an import: a `crate::` path anywhere in a file outside comments (in `use`
//! items with their `{…}` groups expanded, and in paths written inline), test modules included.
//! Each path names the longest module it starts with (`crate::raft::replica::Replica` names
//! `raft::replica`; `crate::raft::Thing` names `raft`, the folder's `mod.rs`). The crate root
//! (`lib.rs`, `main.rs`) is left out: it declares and re-exports everything by design. Relative
//! paths (`super::`, `self::`) are not followed: they reach a parent or the module itself.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

use super::{members, rust_files};
use crate::workspace_root;

/// The module a file under `src/` is: `raft/network.rs` → `raft::network`, `metrics/mod.rs` →
/// `metrics`; `None` for the crate root.
fn module_of(relative: &Path) -> Option<String> {
    let text = relative.to_str()?.strip_suffix(".rs")?;
    let text = text.strip_suffix("/mod").unwrap_or(text);
    if text == "lib" || text == "main" {
        return None;
    }
    Some(text.replace('/', "::"))
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Expands the path (and any `{…}` group) that starts at `text` into full paths after `prefix`.
fn expand(prefix: &str, text: &str, out: &mut Vec<String>) {
    let mut path = prefix.to_owned();
    let mut rest = text;
    loop {
        let ident: String = rest.chars().take_while(|c| is_ident(*c)).collect();
        if ident.is_empty() {
            if let Some(group) = rest.strip_prefix('{') {
                for item in split_group(group) {
                    expand(&path, item.trim_start(), out);
                }
                // The group's items are the paths; its prefix alone is none.
                return;
            }
            break;
        }
        if !path.is_empty() {
            path.push_str("::");
        }
        path.push_str(&ident);
        rest = &rest[ident.len()..];
        match rest.strip_prefix("::") {
            Some(next) => rest = next,
            None => break,
        }
    }
    if !path.is_empty() && path != prefix {
        out.push(path);
    }
}

/// The comma-separated items of a `{…}` group whose opening brace is already consumed.
fn split_group(group: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (at, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(&group[start..at]);
                return items;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&group[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    items
}

/// Every `crate::` path in `source` outside line comments, without the `crate::`.
fn crate_paths(source: &str) -> Vec<String> {
    let code: String = source
        .lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n");
    let mut paths = Vec::new();
    let mut from = 0;
    while let Some(found) = code[from..].find("crate::") {
        let at = from + found;
        let after = at + "crate::".len();
        let preceded_by_ident = code[..at].chars().next_back().is_some_and(is_ident);
        if !preceded_by_ident {
            expand("", &code[after..], &mut paths);
        }
        from = after;
    }
    paths
}

/// The module a path names: the longest of `modules` it starts with.
fn named_module<'a>(path: &str, modules: &'a BTreeSet<String>) -> Option<&'a String> {
    let parts: Vec<&str> = path.split("::").collect();
    (1..=parts.len())
        .rev()
        .find_map(|len| modules.get(&parts[..len].join("::")))
}

/// The strongly connected components of more than one module (Tarjan's algorithm).
fn loops(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Search<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Search<'a> {
        fn visit(&mut self, node: &'a str) {
            let n = self.index.len();
            self.index.insert(node, n);
            self.low.insert(node, n);
            self.stack.push(node);
            self.on_stack.insert(node);
            for next in self.edges.get(node).into_iter().flatten() {
                let next = next.as_str();
                if !self.index.contains_key(next) {
                    self.visit(next);
                    let low = self.low[node].min(self.low[next]);
                    self.low.insert(node, low);
                } else if self.on_stack.contains(next) {
                    let low = self.low[node].min(self.index[next]);
                    self.low.insert(node, low);
                }
            }
            if self.low[node] == self.index[node] {
                let mut component = Vec::new();
                while let Some(top) = self.stack.pop() {
                    self.on_stack.remove(top);
                    component.push(top.to_owned());
                    if top == node {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut search = Search {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for node in edges.keys() {
        if !search.index.contains_key(node.as_str()) {
            search.visit(node);
        }
    }
    search.found
}

/// Module → the modules it imports, for the crate whose `src/` is `src`.
fn import_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let files: Vec<(String, String)> = rust_files(src)
        .into_iter()
        .filter_map(|file| {
            let module = module_of(file.strip_prefix(src).ok()?)?;
            let source = fs::read_to_string(&file).ok()?;
            Some((module, source))
        })
        .collect();
    let modules: BTreeSet<String> = files.iter().map(|(module, _)| module.clone()).collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, source) in &files {
        let imported = edges.entry(module.clone()).or_default();
        for path in crate_paths(source) {
            if let Some(target) = named_module(&path, &modules)
                && target != module
            {
                imported.insert(target.clone());
            }
        }
    }
    edges
}

#[test]
fn no_module_imports_a_module_that_imports_it_back() {
    let root = workspace_root();
    let mut problems = Vec::new();
    for member in members() {
        let src = root.join(&member).join("src");
        if !src.is_dir() {
            continue;
        }
        let edges = import_graph(&src);
        for component in loops(&edges) {
            let detail: Vec<String> = component
                .iter()
                .map(|module| {
                    let within: Vec<&String> = edges[module]
                        .iter()
                        .filter(|target| component.contains(target))
                        .collect();
                    format!("    {module} imports {within:?}")
                })
                .collect();
            problems.push(format!(
                "  {member}: these modules import each other, directly or through one another; \
                 move what they share into a module of its own that imports none of them:\n{}",
                detail.join("\n")
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "import loops:\n{}",
        problems.join("\n")
    );
}

#[test]
fn paths_expand_groups_and_name_the_longest_module() {
    let source = "use crate::raft::{replica::{Replica, Leader}, types};\n\
                  // crate::ct::node is only a comment\n\
                  fn f() { crate::metrics::observe(); my_crate::x(); }\n";
    assert_eq!(
        crate_paths(source),
        [
            "raft::replica::Replica",
            "raft::replica::Leader",
            "raft::types",
            "metrics::observe"
        ]
    );
    let modules: BTreeSet<String> = ["raft", "raft::replica", "metrics"]
        .into_iter()
        .map(str::to_owned)
        .collect();
    assert_eq!(
        named_module("raft::replica::Replica", &modules).map(String::as_str),
        Some("raft::replica")
    );
    assert_eq!(
        named_module("raft::types", &modules).map(String::as_str),
        Some("raft")
    );
    assert_eq!(named_module("ct::node", &modules), None);
}

#[test]
fn a_loop_through_a_third_module_is_found() {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut add = |from: &str, to: &str| {
        edges
            .entry(from.to_owned())
            .or_default()
            .insert(to.to_owned());
    };
    add("ct::node", "ct::mirror");
    add("ct::mirror", "metrics");
    add("metrics", "ct::node");
    add("raft::replica", "metrics");
    assert_eq!(loops(&edges), [vec!["ct::mirror", "ct::node", "metrics"]]);
    edges.get_mut("metrics").unwrap().clear();
    assert!(loops(&edges).is_empty());
}
