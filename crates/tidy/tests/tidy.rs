//! The house rules, read off the source tree: every Rust file opens with a
//! `//!` line; no library crate's modules import each other in a circle
//! (through `crate::`, `super::`, `self::` or a child module's name); and
//! the gateway's folders are its layers: each top-level module imports only
//! itself and the folders below it in [`GATEWAY_LAYERS`], so no two folders
//! import each other (the request path never reaches into the listeners or
//! the operations side, and the codecs never into the request path). Each
//! failure names the files or imports that break the rule; the folder graph
//! and its counts print with
//! `cargo test -p shuffle-shard-tidy --test tidy folder_graph -- --nocapture`.

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

/// The crate paths `code` names (`crate::a::b::C` gives `a::b::C`), in
/// paths and in `use crate::{a, b::c}` groups, as far as they are made of
/// names. `module` is the module whose code it is: `self::x` is read as
/// `module::x`, each `super::` climbs one module up, and a path that starts
/// with one of `names` (its child modules, and the modules it brought in by
/// name, as `use crate::a::b;` brings `b`) is read from the module that
/// name stands for; so a circle through relative paths is seen as well as
/// one through `crate::`.
fn imported(module: &str, names: &BTreeMap<String, String>, code: &str) -> BTreeSet<String> {
    fn path_at(text: &str) -> String {
        text.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
            .collect::<String>()
            .trim_end_matches(':')
            .to_owned()
    }
    fn join(base: &str, path: &str) -> String {
        match (base.is_empty(), path.is_empty()) {
            (true, _) => path.to_owned(),
            (false, true) => base.to_owned(),
            (false, false) => format!("{base}::{path}"),
        }
    }
    fn parent(module: &str) -> &str {
        module.rfind("::").map_or("", |at| &module[..at])
    }
    let is_name = |c: char| c.is_alphanumeric() || c == '_';
    let mut paths = BTreeSet::new();
    let mut at = 0;
    while at < code.len() {
        let rest = &code[at..];
        let Some(first) = rest.chars().next() else {
            break;
        };
        let starts_path = is_name(first)
            && !code[..at]
                .chars()
                .next_back()
                .is_some_and(|c| is_name(c) || c == ':');
        if !starts_path {
            at += first.len_utf8();
            continue;
        }
        let word: String = rest.chars().take_while(|c| is_name(*c)).collect();
        at += word.len();
        if !code[at..].starts_with("::") {
            continue;
        }
        // Where the path is rooted, and what of it is already read.
        let (mut base, mut tail) = match word.as_str() {
            "crate" => (String::new(), &code[at + 2..]),
            "self" => (module.to_owned(), &code[at + 2..]),
            "super" => (parent(module).to_owned(), &code[at + 2..]),
            name => match names.get(name) {
                Some(stands_for) => (stands_for.clone(), &code[at + 2..]),
                None => continue,
            },
        };
        while let Some(up) = tail.strip_prefix("super::") {
            base = parent(&base).to_owned();
            tail = up;
        }
        if let Some(group) = tail.strip_prefix('{') {
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
                    if !path.is_empty() && path != "self" {
                        paths.insert(join(&base, &path));
                    }
                    entry_start = None;
                }
            }
        } else {
            let path = path_at(tail);
            if !(base.is_empty() && path.is_empty()) {
                paths.insert(join(&base, &path));
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
            let code = code(&text);
            // The names a path may start with: the child modules, then
            // also the modules the first reading shows brought in by name.
            let mut names: BTreeMap<String, String> = modules
                .keys()
                .filter_map(|other| other.strip_prefix(name.as_str())?.strip_prefix("::"))
                .filter(|child| !child.contains("::"))
                .map(|child| (child.to_owned(), format!("{name}::{child}")))
                .collect();
            for path in imported(name, &names, &code) {
                if modules.contains_key(&path) && path != *name {
                    let last = path.rsplit("::").next().unwrap_or(&path).to_owned();
                    names.entry(last).or_insert(path);
                }
            }
            let deps = imported(name, &names, &code)
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

/// The gateway's layers, lowest first: each a top-level module (a folder,
/// or a file standing alone as a folder of one) and what it holds. A module
/// may import its own folder (without a circle, checked above) and the
/// folders below; never one above. `crates/gateway/src/lib.rs` lists the
/// same folders in the same order.
const GATEWAY_LAYERS: [(&str, &str); 21] = [
    (
        "syntax",
        "the bytes' grammar: header fields as written, gRPC's conventions",
    ),
    ("telemetry", "metrics, sliding windows and the access log"),
    ("config", "the configuration file, validated"),
    (
        "discovery",
        "shards found in DNS or Kubernetes, and the guard every change of them passes",
    ),
    ("tenants", "the tenant registry, compact, and its sources"),
    (
        "cell",
        "tenant -> cell and each cell's placement; the live blast radius",
    ),
    (
        "store",
        "the Redis server replicas share: one connection, never waited on while down",
    ),
    (
        "trust",
        "what of a client's request may reach a shard, who the client is",
    ),
    (
        "protocol",
        "HTTP/1.1 as bytes both ways, writing what trust lets through",
    ),
    (
        "upstream",
        "each shard's pooled connections and the request bodies they carry",
    ),
    (
        "health",
        "the health state machine, the quarantine, the retry budget",
    ),
    ("limit", "per-tenant limits"),
    ("state", "the swappable snapshot and the per-shard state"),
    (
        "fleet",
        "replicas as one gateway: containment and marks shared through the store",
    ),
    (
        "tenant_sync",
        "tenants from the tenant store, kept current without a reload",
    ),
    (
        "discovery_sync",
        "discovered memberships kept current, each change applied as the guard decides",
    ),
    (
        "probe",
        "the active health checks, over the snapshot's shards",
    ),
    ("route", "the request path"),
    ("ops", "admin API, status page and the views they share"),
    ("listen", "accepting clients and serving their connections"),
    ("runtime", "starting and stopping it all"),
];

/// The folder (top-level module) a gateway module lives in.
fn folder_of(module: &str) -> &str {
    module.split("::").next().unwrap_or(module)
}

/// The layer of a gateway module: its folder's place in [`GATEWAY_LAYERS`].
fn layer_of(module: &str) -> Option<usize> {
    let folder = folder_of(module);
    GATEWAY_LAYERS.iter().position(|(name, _)| *name == folder)
}

/// The gateway's imports read at folder level, and what breaks the layers.
struct Layering {
    /// (folder, folder it imports) → the module imports that make the arrow.
    arrows: BTreeMap<(String, String), BTreeSet<(String, String)>>,
    /// Modules whose folder is not in [`GATEWAY_LAYERS`].
    unplaced: Vec<String>,
    /// Entries of [`GATEWAY_LAYERS`] that name no folder.
    stale: Vec<&'static str>,
    /// Folder arrows that point at a folder above.
    back_arrows: Vec<(String, String)>,
    /// Pairs of folders that import each other.
    mutual: Vec<(String, String)>,
    /// Module imports whose target's folder is above the importer's.
    against_order: Vec<(String, String)>,
}

impl Layering {
    fn of(graph: &BTreeMap<String, BTreeSet<String>>) -> Layering {
        let mut arrows: BTreeMap<(String, String), BTreeSet<(String, String)>> = BTreeMap::new();
        for (module, deps) in graph {
            for dep in deps {
                let (from, to) = (folder_of(module), folder_of(dep));
                if from != to {
                    arrows
                        .entry((from.to_owned(), to.to_owned()))
                        .or_default()
                        .insert((module.clone(), dep.clone()));
                }
            }
        }
        let folders: BTreeSet<&str> = graph.keys().map(|module| folder_of(module)).collect();
        let unplaced = graph
            .keys()
            .filter(|module| layer_of(module).is_none())
            .cloned()
            .collect();
        let stale = GATEWAY_LAYERS
            .iter()
            .map(|(name, _)| *name)
            .filter(|name| !folders.contains(name))
            .collect();
        let above = |from: &str, to: &str| match (layer_of(from), layer_of(to)) {
            (Some(from), Some(to)) => to > from,
            _ => false,
        };
        let back_arrows = arrows
            .keys()
            .filter(|(from, to)| above(from, to))
            .cloned()
            .collect();
        let mutual = arrows
            .keys()
            .filter(|(from, to)| from < to && arrows.contains_key(&(to.clone(), from.clone())))
            .cloned()
            .collect();
        let against_order = arrows
            .iter()
            .filter(|((from, to), _)| above(from, to))
            .flat_map(|(_, imports)| imports.iter().cloned())
            .collect();
        Layering {
            arrows,
            unplaced,
            stale,
            back_arrows,
            mutual,
            against_order,
        }
    }

    fn is_clean(&self) -> bool {
        self.unplaced.is_empty()
            && self.stale.is_empty()
            && self.back_arrows.is_empty()
            && self.mutual.is_empty()
            && self.against_order.is_empty()
    }

    /// The folder graph, lowest layer first, each folder with the folders
    /// it imports (an arrow up is marked and its imports listed), then the
    /// counts.
    fn render(&self) -> String {
        let mut out = String::from("gateway folder graph, lowest layer first:\n");
        let mut folders: Vec<&str> = GATEWAY_LAYERS.iter().map(|(name, _)| *name).collect();
        for (from, to) in self.arrows.keys() {
            for folder in [from, to] {
                if !folders.contains(&folder.as_str()) {
                    folders.push(folder);
                }
            }
        }
        for (at, folder) in folders.iter().enumerate() {
            let targets: Vec<String> = self
                .arrows
                .keys()
                .filter(|(from, _)| from == folder)
                .map(|(from, to)| {
                    if self.back_arrows.contains(&(from.clone(), to.clone())) {
                        format!("{to} (UP)")
                    } else {
                        to.clone()
                    }
                })
                .collect();
            out += &format!("  {at:>2} {folder} -> {}\n", targets.join(", "));
            for ((from, to), imports) in &self.arrows {
                if from == folder && self.back_arrows.contains(&(from.clone(), to.clone())) {
                    for (module, dep) in imports {
                        out += &format!("       up: {module} imports {dep}\n");
                    }
                }
            }
        }
        let pairs: Vec<String> = self
            .mutual
            .iter()
            .map(|(a, b)| format!("{a} <-> {b}"))
            .collect();
        out += &format!(
            "folders: {}, folder arrows: {}, folder back-arrows: {}, mutual folder pairs: {}{}, \
             imports against the documented order: {}, modules outside GATEWAY_LAYERS: {:?}, \
             GATEWAY_LAYERS entries naming no folder: {:?}\n",
            folders.len(),
            self.arrows.len(),
            self.back_arrows.len(),
            self.mutual.len(),
            if pairs.is_empty() {
                String::new()
            } else {
                format!(" ({})", pairs.join(", "))
            },
            self.against_order.len(),
            self.unplaced,
            self.stale,
        );
        out
    }
}

/// Prints the gateway's folder graph and its counts (run it with
/// `cargo test -p shuffle-shard-tidy --test tidy folder_graph -- --nocapture`)
/// and fails unless every folder is one layer of [`GATEWAY_LAYERS`], no
/// folder imports one above it and no two folders import each other.
#[test]
fn folder_graph_runs_down_the_layers() {
    let layering = Layering::of(&import_graph(&crates_dir().join("gateway/src")));
    let picture = layering.render();
    println!("{picture}");
    assert!(
        layering.is_clean(),
        "the gateway's folders are not its layers (GATEWAY_LAYERS in {}): every module's folder \
         must be listed there, and a folder may import only the folders listed before it; move \
         the module that imports upward into the layer its imports say, or pass what it needs \
         down as a parameter\n{picture}",
        file!()
    );
}

/// `crates/gateway/src/lib.rs` documents the layers lowest first as a list
/// of `- [`folder`]` lines, and ARCHITECTURE.md's gateway section as a list
/// of `- `folder/`` (or `folder.rs`) lines; both must name the folders of
/// [`GATEWAY_LAYERS`] in the same order, so the documented order is the
/// checked one.
#[test]
fn the_gateways_documented_order_is_the_checked_one() {
    let checked: Vec<&str> = GATEWAY_LAYERS.iter().map(|(name, _)| *name).collect();
    let lib = std::fs::read_to_string(crates_dir().join("gateway/src/lib.rs")).unwrap();
    let documented: Vec<&str> = lib
        .lines()
        .filter_map(|line| line.strip_prefix("//! - [`"))
        .filter_map(|rest| rest.split('`').next())
        .collect();
    assert_eq!(
        documented,
        checked,
        "crates/gateway/src/lib.rs lists the layers (left) in another order than GATEWAY_LAYERS \
         in {} (right); make the two lists name the same folders, lowest first",
        file!()
    );
    let architecture = std::fs::read_to_string(crates_dir().join("../ARCHITECTURE.md")).unwrap();
    let section = architecture
        .split("\n### ")
        .find(|section| section.starts_with("`crates/gateway`"))
        .expect("ARCHITECTURE.md has a `### `crates/gateway`` section");
    let documented: Vec<&str> = section
        .lines()
        .filter_map(|line| line.strip_prefix("- `"))
        .filter_map(|rest| rest.split('`').next())
        .map(|name| name.trim_end_matches('/').trim_end_matches(".rs"))
        .collect();
    assert_eq!(
        documented,
        checked,
        "ARCHITECTURE.md's gateway section lists the folders (left) in another order than \
         GATEWAY_LAYERS in {} (right); make the two lists name the same folders, lowest first",
        file!()
    );
}

#[test]
fn the_import_reader_sees_paths_and_groups() {
    let none = BTreeMap::new();
    let paths = imported(
        "m",
        &none,
        "use crate::a::X;\nuse crate::{b, c::{D, E}, d::F};\nfn f() { crate::e::g(); }",
    );
    let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
    assert_eq!(paths, ["a::X", "b", "c", "d::F", "e::g"]);
    // Relative paths: `self::`, `super::` (repeated, in groups, as a glob)
    // and a path from a name standing for a module (a child, or one brought
    // in with `use crate::z::y;`), read from inside `up::m`.
    let names = BTreeMap::from([
        ("kid".to_owned(), "up::m::kid".to_owned()),
        ("y".to_owned(), "z::y".to_owned()),
    ]);
    let paths = imported(
        "up::m",
        &names,
        "use self::a::X;\nuse super::{b, c::D};\nuse super::super::e;\nuse super::*;\n\
         fn f() -> kid::Pool { other::kid::g(); Self::h(); myself::i(); y::w::run() }",
    );
    let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
    assert_eq!(
        paths,
        [
            "e",
            "up",
            "up::b",
            "up::c::D",
            "up::m::a::X",
            "up::m::kid::Pool",
            "z::y::w::run"
        ]
    );
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
    assert_eq!(folder_of("route::proxy"), "route");
    assert_eq!(layer_of("route::proxy"), layer_of("route"));
    assert!(layer_of("protocol::wire") < layer_of("route::proxy"));
    assert_eq!(layer_of("nowhere::x"), None);
}

/// The folder checks on a made-up graph: an arrow up, a pair of folders
/// importing each other, a module outside the table, an entry naming no
/// folder. Each is counted and the picture names it.
#[test]
fn the_folder_checks_see_each_kind_of_break() {
    let (low, high) = (GATEWAY_LAYERS[0].0, GATEWAY_LAYERS[1].0);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    graph.insert(format!("{low}::a"), BTreeSet::from([format!("{high}::b")]));
    graph.insert(format!("{high}::b"), BTreeSet::from([format!("{low}::c")]));
    graph.insert(format!("{low}::c"), BTreeSet::new());
    graph.insert("nowhere::d".to_owned(), BTreeSet::new());
    let layering = Layering::of(&graph);
    assert!(!layering.is_clean());
    assert_eq!(layering.back_arrows, [(low.to_owned(), high.to_owned())]);
    assert_eq!(layering.mutual.len(), 1);
    assert_eq!(
        layering.against_order,
        [(format!("{low}::a"), format!("{high}::b"))]
    );
    assert_eq!(layering.unplaced, ["nowhere::d"]);
    assert_eq!(layering.stale.len(), GATEWAY_LAYERS.len() - 2);
    let picture = layering.render();
    assert!(
        picture.contains(&format!("up: {low}::a imports {high}::b")),
        "{picture}"
    );
    assert!(
        picture.contains("folder back-arrows: 1, mutual folder pairs: 1"),
        "{picture}"
    );
}

/// The longest production file, in lines, a reader is asked to hold.
const MAX_FILE_LINES: usize = 800;
/// The longest production function, in lines, from its `fn` line to its
/// closing brace.
const MAX_FN_LINES: usize = 150;

/// Files (paths from `crates/`) and functions (`path::name`) allowed over
/// the limits, each with the reason it is one. Prefer splitting to adding
/// one here.
const SIZE_EXEMPTIONS: [(&str, &str); 0] = [];

/// A file's production lines: all of it up to a `#[cfg(test)]` line that
/// is followed by `mod tests` (by the house convention, the unit tests sit
/// at the end of the file).
fn production_lines(text: &str) -> Vec<&str> {
    let lines: Vec<&str> = text.lines().collect();
    for (at, line) in lines.iter().enumerate() {
        if line.trim() != "#[cfg(test)]" {
            continue;
        }
        let next = lines[at + 1..].iter().find(|line| !line.trim().is_empty());
        if next.is_some_and(|next| {
            let next = next.trim_start();
            let next = next.strip_prefix("pub ").unwrap_or(next);
            next.starts_with("mod tests")
        }) {
            return lines[..at].to_vec();
        }
    }
    lines
}

/// The name of the function `line` opens, if it opens one: a `fn` after
/// the qualifiers a signature may carry (`pub(crate) const async unsafe
/// extern "C"`).
fn fn_name(line: &str) -> Option<&str> {
    let mut rest = line.trim_start();
    loop {
        let before = rest;
        if rest.starts_with("pub(") {
            rest = rest[rest.find(')')? + 1..].trim_start();
        }
        for word in ["pub ", "const ", "async ", "unsafe ", "default "] {
            if let Some(after) = rest.strip_prefix(word) {
                rest = after.trim_start();
            }
        }
        if let Some(after) = rest.strip_prefix("extern ") {
            rest = after.trim_start();
            if rest.starts_with('"') {
                rest = rest[1..].split_once('"')?.1.trim_start();
            }
        }
        if rest == before {
            break;
        }
    }
    let rest = rest.strip_prefix("fn ")?;
    let end = rest
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    (end > 0).then(|| &rest[..end])
}

/// The functions in `lines` with their line counts: from the `fn` line to
/// the first later line that is the closing brace at the `fn` line's
/// indentation. A declaration without a body (its signature ends in `;`
/// before any `{`) is no function here.
fn function_lengths<'t>(lines: &[&'t str]) -> Vec<(&'t str, usize, usize)> {
    let mut found = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        let Some(name) = fn_name(line) else {
            continue;
        };
        let indent = &line[..line.len() - line.trim_start().len()];
        let mut body = false;
        for later in &lines[at..] {
            let later = later.trim_end();
            if later.ends_with('{') || later.contains(" {") {
                body = true;
                break;
            }
            if later.ends_with(';') {
                break;
            }
        }
        if !body {
            continue;
        }
        let closing = format!("{indent}}}");
        if let Some(end) = lines[at..]
            .iter()
            .position(|later| later.trim_end() == closing)
        {
            found.push((name, at + 1, end + 1));
        }
    }
    found
}

/// Every production file and function over its limit, as `(name, lines)`;
/// a name in `exempt` is skipped. `files` is `(name, text)`.
fn oversized(files: &[(String, String)], exempt: &[&str]) -> Vec<(String, usize)> {
    let mut over = Vec::new();
    for (name, text) in files {
        let lines = production_lines(text);
        if lines.len() > MAX_FILE_LINES && !exempt.contains(&name.as_str()) {
            over.push((name.clone(), lines.len()));
        }
        for (function, line, length) in function_lengths(&lines) {
            let label = format!("{name}::{function}");
            if length > MAX_FN_LINES && !exempt.contains(&label.as_str()) {
                over.push((format!("{label} (line {line})"), length));
            }
        }
    }
    over
}

/// The production source: every `.rs` file under `crates/` except tests,
/// benchmarks and examples, named by its path from `crates/`.
fn production_files() -> Vec<(String, String)> {
    let crates = crates_dir();
    rust_files(&crates)
        .into_iter()
        .filter_map(|file| {
            let name = file
                .strip_prefix(&crates)
                .ok()?
                .to_string_lossy()
                .into_owned();
            let skipped = name
                .split('/')
                .any(|part| matches!(part, "tests" | "benches" | "examples"));
            (!skipped).then(|| (name, std::fs::read_to_string(&file).unwrap()))
        })
        .collect()
}

/// No production file over [`MAX_FILE_LINES`], no production function
/// over [`MAX_FN_LINES`], but for [`SIZE_EXEMPTIONS`] (each still over its
/// limit, so the table does not outlive its reasons).
#[test]
fn files_and_functions_a_reader_can_hold() {
    let exempt: Vec<&str> = SIZE_EXEMPTIONS.iter().map(|(name, _)| *name).collect();
    let files = production_files();
    let over = oversized(&files, &exempt);
    assert!(
        over.is_empty(),
        "over the limit ({MAX_FILE_LINES} production lines a file, {MAX_FN_LINES} a function):\n{}\n\
         split it by responsibility into named steps or files in the same folder; see \
         ARCHITECTURE.md, \"How to check\"",
        over.iter()
            .map(|(name, lines)| format!("  {name}: {lines} lines"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let measured = oversized(&files, &[]);
    let stale: Vec<&str> = exempt
        .iter()
        .filter(|name| {
            !measured
                .iter()
                .any(|(over, _)| over == *name || over.starts_with(&format!("{name} (line ")))
        })
        .copied()
        .collect();
    assert!(
        stale.is_empty(),
        "SIZE_EXEMPTIONS in {} names what is no longer over its limit (or no longer exists): \
         {stale:?}; remove those rows",
        file!()
    );
}

/// The size reader on made-up files: a file one line over, a function one
/// line over (and one at the limit, a declaration, a nested closing brace),
/// the unit tests left out, and an exemption honoured.
#[test]
fn the_size_rule_sees_each_kind_of_break() {
    let long_fn = format!(
        "pub(crate) async fn long() {{\n{}}}\n",
        "    x();\n".repeat(MAX_FN_LINES - 1)
    );
    let fine_fn = format!(
        "    fn fine(&self) -> u8 {{\n        if a {{\n{}        }}\n    }}\n",
        "        x();\n".repeat(MAX_FN_LINES - 4)
    );
    let declared = "    fn declared(&self)\n        -> u8;\n";
    let tests = format!(
        "#[cfg(test)]\nmod tests {{\n    fn huge() {{\n{}    }}\n}}\n",
        "x();\n".repeat(MAX_FILE_LINES)
    );
    let small = format!("//! small\n{declared}{fine_fn}{long_fn}{tests}");
    let big = format!("//! big\n{}", "const X: u8 = 0;\n".repeat(MAX_FILE_LINES));
    let files = vec![
        ("a/small.rs".to_owned(), small),
        ("b/big.rs".to_owned(), big),
    ];
    let over = oversized(&files, &[]);
    let line = 1 + 2 + MAX_FN_LINES + 1;
    assert_eq!(
        over,
        [
            (format!("a/small.rs::long (line {line})"), MAX_FN_LINES + 1),
            ("b/big.rs".to_owned(), MAX_FILE_LINES + 1),
        ]
    );
    assert_eq!(oversized(&files, &["a/small.rs::long", "b/big.rs"]), []);
    assert_eq!(fn_name("    pub(crate) const unsafe fn go<T>("), Some("go"));
    assert_eq!(fn_name("extern \"C\" fn c_abi()"), Some("c_abi"));
    assert_eq!(fn_name("let fnord = 1;"), None);
}
