//! The engine's layers import only downwards, and no two of its modules import each other in a cycle.
//!
//! Read from the `use` lines and paths of every file under `src/` (comments and doc links aside: a doc
//! may point up to the layer that uses a type; unit tests aside: like integration tests, they may drive
//! the whole crate). Layers, bottom first: the foundation (`frame`,
//! `event_log`, `setting`), `shm`, `agent`, `media`, `cluster`, `client`, `storage`, `node`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The layers, bottom first; a module may import its own layer and those before it.
const LAYERS: &[&[&str]] = &[
    &["frame", "event_log", "setting"],
    &["shm"],
    &["agent"],
    &["media"],
    &["cluster"],
    &["client"],
    &["storage"],
    &["node"],
];

fn layer_of(top: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&top))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module a file under `src/` defines, as path segments (`src/media/transport/mod.rs` is
/// `["media", "transport"]`).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut segments: Vec<String> = rel.iter().map(|s| s.to_string_lossy().into_owned()).collect();
    if segments.last().is_some_and(|s| s == "mod" || s == "lib") {
        segments.pop();
    }
    segments
}

/// Every `crate::a::b` path in the code of `text` (comments stripped), as its first two segments.
fn crate_paths(text: &str) -> Vec<(String, Option<String>)> {
    let mut paths = Vec::new();
    for line in text.lines() {
        let code = match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        };
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            let preceded_by_ident =
                rest[..at].chars().next_back().is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$');
            rest = &rest[at + "crate::".len()..];
            if preceded_by_ident {
                continue;
            }
            let segment = |s: &str| s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect::<String>();
            let first = segment(rest);
            let after = &rest[first.len()..];
            let second = after.strip_prefix("::").map(segment).filter(|s| !s.is_empty());
            if !first.is_empty() {
                paths.push((first, second));
            }
        }
    }
    paths
}

struct Imports {
    /// (file, its module, the module it imports), for every import of another top-level module.
    edges: Vec<(PathBuf, Vec<String>, Vec<String>)>,
}

fn imports() -> Imports {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut edges = Vec::new();
    for file in files {
        let module = module_of(&src, &file);
        if module.is_empty() {
            continue; // lib.rs: the root re-exports the API from every layer.
        }
        if module.last().is_some_and(|m| m == "tests") {
            continue; // Unit tests, like integration tests, may drive the whole crate.
        }
        let text = fs::read_to_string(&file).unwrap();
        let code = text.split("#[cfg(test)]\nmod ").next().unwrap();
        for (first, second) in crate_paths(code) {
            let mut target = vec![first];
            target.extend(second);
            edges.push((file.clone(), module.clone(), target));
        }
    }
    Imports { edges }
}

#[test]
fn every_layer_imports_only_the_layers_below_it() {
    let mut upward = Vec::new();
    for (file, module, target) in &imports().edges {
        let (Some(from), Some(to)) = (layer_of(&module[0]), layer_of(&target[0])) else {
            panic!(
                "{}: `crate::{}` is in no layer: add it to LAYERS in tests/layers.rs",
                file.display(),
                target.join("::")
            );
        };
        if to > from {
            upward.push(format!("{}: imports crate::{}", file.display(), target.join("::")));
        }
    }
    upward.sort();
    upward.dedup();
    assert!(upward.is_empty(), "upward imports:\n{}", upward.join("\n"));
}

/// The unit of the cycle check: a layer's module (`media::transport`), or a foundation module (`frame`).
fn unit(path: &[String]) -> String {
    if layer_of(&path[0]) == Some(0) || path.len() < 2 {
        path[0].clone()
    } else {
        format!("{}::{}", path[0], path[1])
    }
}

#[test]
fn no_two_modules_import_each_other_in_a_cycle() {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (_, module, target) in &imports().edges {
        let (from, to) = (unit(module), unit(target));
        if from != to {
            graph.entry(from).or_default().insert(to);
        }
    }
    // Depth-first search for a back edge; report the cycle it closes.
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
        cycles: &mut Vec<String>,
    ) {
        if let Some(at) = stack.iter().position(|n| n == node) {
            let mut cycle = stack[at..].to_vec();
            cycle.push(node.to_string());
            cycles.push(cycle.join(" -> "));
            return;
        }
        if !done.insert(node.to_string()) {
            return;
        }
        stack.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            visit(next, graph, stack, done, cycles);
        }
        stack.pop();
    }
    let mut cycles = Vec::new();
    let mut done = BTreeSet::new();
    for node in graph.keys() {
        visit(node, &graph, &mut Vec::new(), &mut done, &mut cycles);
    }
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

#[test]
fn the_path_reader_finds_imports_and_skips_comments() {
    let text = "use crate::media::transport::Network;\n/// [`crate::node`]\nlet x = crate::shm::buffer::X; // crate::node\nuse quorumcast::node;";
    let paths = crate_paths(text);
    assert_eq!(paths, vec![("media".into(), Some("transport".into())), ("shm".into(), Some("buffer".into()))]);
}

/// The names of what a replicated log means to a cluster: the media layer and the frame format it sends
/// carry a cluster's frames and flags without naming them (as Aeron's driver knows nothing of Aeron
/// Cluster): its extension frames and generic markers are what it knows.
const CLUSTER_NAMES: &[&str] = &[
    "AppendPosition",
    "CommitPosition",
    "APPEND_POSITION",
    "COMMIT_POSITION",
    "TERM_START",
    "term_start",
    "SESSION_FLAG",
    "leadership_term",
    "member_id",
];

#[test]
fn the_frame_format_and_the_media_layer_name_nothing_of_the_cluster() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![src.join("frame.rs")];
    rust_files(&src.join("media"), &mut files);
    let mut found = Vec::new();
    for file in files {
        let text = fs::read_to_string(&file).unwrap();
        // Unit tests aside, as for the imports.
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for (n, line) in code.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            for name in CLUSTER_NAMES.iter().filter(|name| code.contains(*name)) {
                found.push(format!("{}:{}: {name}", file.strip_prefix(&src).unwrap().display(), n + 1));
            }
        }
    }
    assert!(found.is_empty(), "cluster names in the frame format or the media layer:\n{}", found.join("\n"));
}
