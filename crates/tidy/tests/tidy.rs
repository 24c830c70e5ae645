//! The house rules, read off the source tree: every Rust file opens with a
//! `//!` line; no library crate's modules import each other in a circle;
//! and the gateway's modules import only their own layer or the layers
//! below it (the request path never reaches into the listeners or the
//! operations side, and the codecs never into the request path). Each
//! failure names the files that break the rule.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The workspace's `crates/` folder.
fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every `.rs` file below `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                if path.file_name().is_some_and(|name| name != "target") {
                    stack.push(path);
                }
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

#[test]
fn every_rust_file_opens_with_a_module_doc_line() {
    let crates = crates_dir();
    let mut undocumented = Vec::new();
    for file in rust_files(&crates)
        .iter()
        .chain(&rust_files(&crates.join("../fuzz")))
    {
        let text = std::fs::read_to_string(file).unwrap();
        if !text.starts_with("//!") {
            undocumented.push(file.display().to_string());
        }
    }
    assert!(
        undocumented.is_empty(),
        "these files do not open with a `//!` line saying what they are for:\n{}",
        undocumented.join("\n")
    );
}

/// A library crate's source: its modules, each a file (`src/a/b.rs` is
/// `a::b`, `src/a/mod.rs` is `a`), without the crate root.
fn modules(src: &Path) -> BTreeMap<String, PathBuf> {
    let mut modules = BTreeMap::new();
    for file in rust_files(src) {
        let relative = file.strip_prefix(src).unwrap().with_extension("");
        let mut parts: Vec<String> = relative
            .components()
            .map(|part| part.as_os_str().to_string_lossy().into_owned())
            .collect();
        if parts.last().is_some_and(|last| last == "mod") {
            parts.pop();
        }
        let name = parts.join("::");
        if name == "lib" || name == "main" || name.is_empty() {
            continue;
        }
        modules.insert(name, file);
    }
    modules
}

/// The code of a file without its comments and without its unit tests
/// (by the house convention, a `#[cfg(test)]` module at the end): what
/// the build uses.
fn code(text: &str) -> String {
    let text = text.split("#[cfg(test)]").next().unwrap_or("");
    text.lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths `code` names through `crate::` (`crate::a::b::C` gives
/// `a::b::C`), in paths and in `use crate::{a, b::c}` groups, as far as
/// they are made of names.
fn imported(code: &str) -> BTreeSet<String> {
    fn path_at(text: &str) -> String {
        text.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
            .collect::<String>()
            .trim_end_matches(':')
            .to_owned()
    }
    let mut paths = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // Each entry of the group at brace depth zero.
            let mut depth = 0;
            let mut entry_start = Some(0);
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => entry_start = Some(i + 1),
                    _ => {}
                }
                if let Some(start) = entry_start
                    && !c.is_whitespace()
                    && c != ','
                {
                    let path = path_at(&group[start.max(i)..]);
                    if !path.is_empty() {
                        paths.insert(path);
                    }
                    entry_start = None;
                }
            }
        } else {
            let path = path_at(rest);
            if !path.is_empty() {
                paths.insert(path);
            }
        }
    }
    paths
}

/// The module a path names something in: its longest prefix that is one of
/// `modules`.
fn module_of<'m>(path: &str, modules: &'m BTreeMap<String, PathBuf>) -> Option<&'m str> {
    let mut candidate = path;
    loop {
        if let Some((name, _)) = modules.get_key_value(candidate) {
            return Some(name);
        }
        candidate = &candidate[..candidate.rfind("::")?];
    }
}

/// Module → the crate's other modules it imports. A module's parent is
/// not counted as imported by its children's mere existence, only by use.
fn import_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let modules = modules(src);
    modules
        .iter()
        .map(|(name, file)| {
            let text = std::fs::read_to_string(file).unwrap();
            let deps = imported(&code(&text))
                .iter()
                .filter_map(|path| module_of(path, &modules))
                .filter(|dep| *dep != name)
                .map(str::to_owned)
                .collect();
            (name.clone(), deps)
        })
        .collect()
}

/// The strongly connected components of more than one module (Tarjan).
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Search<'g> {
        graph: &'g BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        found: Vec<Vec<String>>,
    }
    impl<'g> Search<'g> {
        fn visit(&mut self, v: &'g str) {
            let at = self.index.len();
            self.index.insert(v, at);
            self.low.insert(v, at);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in &self.graph[v] {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                loop {
                    let w = self.stack.pop().unwrap();
                    self.on_stack.remove(w);
                    component.push(w.to_owned());
                    if w == v {
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
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !search.index.contains_key(v.as_str()) {
            search.visit(v);
        }
    }
    search.found
}

#[test]
fn no_library_crate_has_an_import_cycle() {
    let mut problems = Vec::new();
    for entry in std::fs::read_dir(crates_dir()).unwrap().flatten() {
        let src = entry.path().join("src");
        if !src.join("lib.rs").exists() {
            continue;
        }
        let graph = import_graph(&src);
        for cycle in cycles(&graph) {
            let edges: Vec<String> = cycle
                .iter()
                .map(|module| {
                    let inside: Vec<&str> = graph[module]
                        .iter()
                        .filter(|dep| cycle.contains(dep))
                        .map(String::as_str)
                        .collect();
                    format!("{module} -> {}", inside.join(", "))
                })
                .collect();
            problems.push(format!(
                "{}: these modules import each other in a circle: {}",
                src.display(),
                edges.join("; ")
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The gateway's layers, lowest first, by module path: a module belongs
/// to the most specific entry that names it or a parent of it. A module may
/// import its own layer (without a cycle, checked above) and the layers
/// below; never above.
const GATEWAY_LAYERS: [(&str, &[&str]); 10] = [
    (
        "foundations: bytes, timers and counters that know nothing of routing",
        &[
            "protocol::fields",
            "protocol::grpc",
            "upstream::idle",
            "listen::shutdown",
            "ops::window",
            "ops::metrics",
            "ops::access_log",
            "trust::target",
            "limit::bucket",
        ],
    ),
    (
        "configuration: the files, validated; placement per cell; health rules",
        &[
            "config",
            "route::cell",
            "ops::live_blast",
            "health",
            "health::retry_budget",
        ],
    ),
    (
        "the Redis server replicas share: one connection, never waited on while down",
        &["store"],
    ),
    (
        "codecs and the trust boundary: HTTP/1.1 both ways, what a client may say, who it is",
        &["protocol", "trust"],
    ),
    (
        "the upstream side: request bodies and each shard's connections",
        &["upstream"],
    ),
    (
        "run-time state: the swappable snapshot, per-shard state, and per-tenant limits",
        &["state", "limit"],
    ),
    (
        "the request path, and the health checks that vouch for its members",
        &["route", "health::check", "health::grpc"],
    ),
    (
        "operations: admin API, status page and the views they share",
        &["ops"],
    ),
    (
        "listeners: accepting clients and serving their connections",
        &["listen"],
    ),
    ("start and stop", &["runtime"]),
];

/// The layer of a gateway module: the most specific entry of
/// [`GATEWAY_LAYERS`] that names it or one of its parents.
fn layer_of(module: &str) -> Option<usize> {
    GATEWAY_LAYERS
        .iter()
        .enumerate()
        .flat_map(|(layer, (_, entries))| entries.iter().map(move |entry| (layer, *entry)))
        .filter(|(_, entry)| module == *entry || module.starts_with(&format!("{entry}::")))
        .max_by_key(|(_, entry)| entry.len())
        .map(|(layer, _)| layer)
}

#[test]
fn the_gateways_modules_import_only_their_layer_and_below() {
    let src = crates_dir().join("gateway/src");
    let graph = import_graph(&src);
    let unplaced: Vec<&String> = graph
        .keys()
        .filter(|module| layer_of(module).is_none())
        .collect();
    assert!(
        unplaced.is_empty(),
        "gateway modules missing from GATEWAY_LAYERS in {}: {unplaced:?}; add each to the layer it belongs to",
        file!()
    );
    let mut upward = Vec::new();
    for (module, deps) in &graph {
        let own = layer_of(module).unwrap();
        for dep in deps {
            let theirs = layer_of(dep).unwrap();
            if theirs > own {
                upward.push(format!(
                    "{module} ({}) imports {dep} ({})",
                    GATEWAY_LAYERS[own].0, GATEWAY_LAYERS[theirs].0
                ));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports that reach upward in crates/gateway/src:\n{}",
        upward.join("\n")
    );
}

#[test]
fn the_import_reader_sees_paths_and_groups() {
    let paths =
        imported("use crate::a::X;\nuse crate::{b, c::{D, E}, d::F};\nfn f() { crate::e::g(); }");
    let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
    assert_eq!(paths, ["a::X", "b", "c", "d::F", "e::g"]);
    let modules: BTreeMap<String, PathBuf> = ["a", "a::b", "c"]
        .into_iter()
        .map(|name| (name.to_owned(), PathBuf::new()))
        .collect();
    assert_eq!(module_of("a::b::C", &modules), Some("a::b"));
    assert_eq!(module_of("a::X", &modules), Some("a"));
    assert_eq!(module_of("z::X", &modules), None);
    let mut graph = BTreeMap::new();
    graph.insert("x".to_owned(), BTreeSet::from(["y".to_owned()]));
    graph.insert("y".to_owned(), BTreeSet::from(["z".to_owned()]));
    graph.insert("z".to_owned(), BTreeSet::from(["x".to_owned()]));
    graph.insert("w".to_owned(), BTreeSet::from(["x".to_owned()]));
    assert_eq!(cycles(&graph), [["x", "y", "z"]]);
    assert_eq!(layer_of("health::check"), Some(6));
    assert_eq!(layer_of("health"), Some(1));
    assert_eq!(layer_of("route::proxy"), Some(6));
    assert_eq!(layer_of("route::cell"), Some(1));
    assert_eq!(layer_of("store"), Some(2));
}
