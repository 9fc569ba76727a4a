//! The layout keeps the story ARCHITECTURE.md tells: every module is in its codemap and
//! every file it names exists, every module says what it owns in a `//!` header, files
//! stay short unless the codemap says why, and imports go only the ways the codemap
//! allows (the API never imports the source client, `api` and `web` never import each
//! other, the read side imports neither, the settings import no feature).

use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(sources(&p));
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    out.sort();
    out
}

fn rel(p: &Path) -> String {
    p.strip_prefix(root().join("src"))
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

fn architecture() -> String {
    std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap()
}

/// The codemap section of ARCHITECTURE.md.
fn codemap() -> String {
    let a = architecture();
    let start = a.find("## Codemap").unwrap();
    let end = a[start..].find("\n## A tick").map(|e| start + e).unwrap();
    a[start..end].to_string()
}

#[test]
fn the_codemap_names_every_module_and_only_real_ones() {
    let map = codemap();
    for p in sources(&root().join("src")) {
        let r = rel(&p);
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        let named = match r.split_once('/') {
            // A file in a folder: the folder's entry names the file (or, for `mod.rs`,
            // the folder itself).
            Some((dir, _)) => {
                map.contains(&format!("`{dir}/`"))
                    && (name == "mod.rs" || map.contains(&format!("`{name}`")))
            }
            None => map.contains(&format!("`{name}`")) || map.contains(&format!("`src/{name}`")),
        };
        assert!(named, "{r} is not in ARCHITECTURE.md's codemap");
    }
    // Every `x.rs` or `dir/` the codemap names exists.
    for (i, _) in map.match_indices('`') {
        let rest = &map[i + 1..];
        let Some(end) = rest.find('`') else { break };
        let t = &rest[..end];
        let is_path = t
            .chars()
            .all(|c| c.is_ascii_lowercase() || "_/.".contains(c));
        if is_path && t.ends_with(".rs") && !t.contains('/') {
            let found = sources(&root().join("src"))
                .iter()
                .any(|p| p.file_name().unwrap().to_string_lossy() == t);
            assert!(found, "the codemap names a missing {t}");
        } else if is_path && t.ends_with('/') && !t.contains('.') && t.len() > 1 {
            let dir = t.trim_end_matches('/');
            let exists = root().join("src").join(dir).is_dir() || root().join(dir).is_dir();
            assert!(exists, "the codemap names a missing folder {t}");
        }
    }
}

#[test]
fn every_module_opens_with_what_it_owns_and_stays_short() {
    let map = codemap();
    for p in sources(&root().join("src")) {
        let r = rel(&p);
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(
            text.starts_with("//!"),
            "{r} does not open with a //! header"
        );
        // Lines of code, without the unit tests at the end.
        let code = text
            .find("#[cfg(test)]\nmod tests")
            .map_or(text.as_str(), |i| &text[..i]);
        let lines = code.lines().count();
        if lines > 520 {
            let entry = own_entry(&map, &r).unwrap_or_default();
            assert!(
                entry.contains("kept in one file"),
                "{r} has {lines} lines of code and its own entry in ARCHITECTURE.md's codemap \
                 does not say why it is kept in one file:\n{entry}"
            );
        }
    }
}

/// The codemap's own entry of the file `rel` (relative to `src/`): the text from where
/// the codemap names the file to where it names the next file of the same folder (or the
/// bullet ends). A top-level file's entry is its bullet; a file in a folder is found in
/// the folder's bullet (`mod.rs` by that name too).
fn own_entry(map: &str, rel: &str) -> Option<String> {
    // The bullets of the codemap, each with its continuation lines and sub-bullets.
    let mut bullets: Vec<String> = Vec::new();
    for line in map.lines() {
        if line.starts_with("- ") {
            bullets.push(line.to_string());
        } else if line.starts_with(' ') && !line.trim().is_empty() {
            if let Some(b) = bullets.last_mut() {
                b.push('\n');
                b.push_str(line);
            }
        } else {
            // A heading, a paragraph or a blank line ends the bullet.
            bullets.push(String::new());
        }
    }
    let (bullet, name) = match rel.rsplit_once('/') {
        Some((dir, name)) => (
            bullets
                .iter()
                .find(|b| b.starts_with(&format!("- `{dir}/`")))?,
            name,
        ),
        None => (
            bullets
                .iter()
                .find(|b| b.starts_with(&format!("- `{rel}`")))?,
            rel,
        ),
    };
    let quoted = format!("`{name}`");
    let start = bullet.find(&quoted)?;
    let rest = &bullet[start + quoted.len()..];
    // The entry ends where the bullet names a sibling file (`x.rs`, no folder).
    let mut end = rest.len();
    for (i, _) in rest.match_indices('`') {
        let t = &rest[i + 1..];
        let Some(close) = t.find('`') else { break };
        let tok = &t[..close];
        if tok.ends_with(".rs")
            && tok != name
            && tok
                .chars()
                .all(|c| c.is_ascii_lowercase() || c == '_' || c == '.')
        {
            end = i;
            break;
        }
    }
    Some(format!("{quoted}{}", &rest[..end]))
}

#[test]
fn a_files_own_codemap_entry_is_found() {
    let map = "- `a.rs` — short.\n- `dir/` — the folder: `mod.rs` runs it, kept in one file: \
               why; `b.rs` is small,\n  and `c.rs` reads (`benches/c.rs` times it).\n\
               ### Next\n- `d.rs` — kept in one file: because.\n";
    assert_eq!(own_entry(map, "a.rs").unwrap(), "`a.rs` — short.");
    assert!(
        own_entry(map, "dir/mod.rs")
            .unwrap()
            .contains("kept in one file")
    );
    assert!(
        !own_entry(map, "dir/b.rs")
            .unwrap()
            .contains("kept in one file")
    );
    assert!(own_entry(map, "dir/c.rs").unwrap().contains("benches/c.rs"));
    assert!(own_entry(map, "d.rs").unwrap().contains("kept in one file"));
    assert_eq!(own_entry(map, "dir/e.rs"), None);
    assert_eq!(own_entry(map, "e.rs"), None);
}

/// The full paths a `use` tree names, whitespace ignored: `crate::{a, b::{c, d as e}}`
/// gives `crate::a`, `crate::b::c`, `crate::b::d`.
fn use_paths(tree: &str) -> Vec<String> {
    // Renames (`x as y`) out first, then whitespace.
    let mut t = tree.replace(['\n', '\t'], " ");
    while let Some(i) = t.find(" as ") {
        let rest = &t[i + 4..];
        let n = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        t.replace_range(i..i + 4 + n, "");
    }
    let t: String = t.chars().filter(|c| !c.is_whitespace()).collect();
    fn expand(prefix: &str, t: &str, out: &mut Vec<String>) {
        // Split `t` at its top-level commas.
        let (mut depth, mut start) = (0, 0);
        let mut parts = Vec::new();
        for (i, c) in t.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    parts.push(&t[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        parts.push(&t[start..]);
        for part in parts.into_iter().filter(|p| !p.is_empty()) {
            match part.find("::{") {
                Some(i) if part.ends_with('}') => {
                    let head = &part[..i];
                    expand(&join(prefix, head), &part[i + 3..part.len() - 1], out);
                }
                _ => out.push(join(prefix, part.trim_end_matches("::*"))),
            }
        }
    }
    fn join(prefix: &str, p: &str) -> String {
        if prefix.is_empty() || p == "self" {
            if p == "self" {
                prefix.to_string()
            } else {
                p.to_string()
            }
        } else {
            format!("{prefix}::{p}")
        }
    }
    let mut out = Vec::new();
    expand("", &t, &mut out);
    out
}

#[test]
fn use_trees_are_expanded() {
    assert_eq!(
        use_paths("crate::{poller, store::{self, Store as S}, api::*}"),
        [
            "crate::poller",
            "crate::store",
            "crate::store::Store",
            "crate::api"
        ]
    );
    assert_eq!(
        use_paths("crate::read::ReadState"),
        ["crate::read::ReadState"]
    );
}

/// Whether `text` names the path `f` (`crate::read`), not merely a longer one that
/// starts with the same letters (`crate::readmodel`).
fn names_path(text: &str, f: &str) -> bool {
    text.match_indices(f).any(|(i, _)| {
        !text[i + f.len()..]
            .chars()
            .next()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

#[test]
fn a_path_is_named_whole() {
    assert!(names_path("use crate::read::ReadState;", "crate::read"));
    assert!(names_path("x(crate::read)", "crate::read"));
    assert!(!names_path("use crate::readmodel::CaseDoc;", "crate::read"));
}

/// `use`s and paths of a folder (or of one file, `x.rs`) that must not appear.
fn never_imports(folder: &str, forbidden: &[&str]) {
    let at = root().join("src").join(folder);
    let files = if at.is_file() { vec![at] } else { sources(&at) };
    assert!(!files.is_empty(), "no source at src/{folder}");
    for p in files {
        // Code only: a doc comment may name the module that mounts this one.
        let text: String = std::fs::read_to_string(&p)
            .unwrap()
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        // Paths written out, and every path a `use` tree names (`use crate::{a, b::c}`
        // names `crate::a` and `crate::b::c`, which no text search finds).
        let mut paths: Vec<String> = vec![text.clone()];
        for (i, _) in text.match_indices("use crate::") {
            let stmt = &text[i + "use ".len()..];
            let end = stmt.find(';').unwrap_or(stmt.len());
            paths.extend(use_paths(&stmt[..end]));
        }
        for f in forbidden {
            for path in &paths {
                let hit = path == f
                    || path.starts_with(&format!("{f}::"))
                    || (path.contains('\n') && names_path(path, f));
                assert!(!hit, "{} imports {f}, against ARCHITECTURE.md", rel(&p));
            }
        }
    }
}

#[test]
fn imports_go_only_the_ways_the_codemap_allows() {
    never_imports(
        "api",
        &[
            "crate::source",
            "crate::web",
            "crate::http",
            "crate::poller",
        ],
    );
    never_imports(
        "web",
        &[
            "crate::source",
            "crate::api",
            "crate::http",
            "crate::poller",
        ],
    );
    never_imports(
        "read",
        &["crate::source", "crate::api", "crate::web", "crate::http"],
    );
    never_imports(
        "config",
        &[
            "crate::export",
            "crate::api",
            "crate::web",
            "crate::poller",
            "crate::projection",
        ],
    );
    never_imports(
        "projection",
        &[
            "crate::api",
            "crate::web",
            "crate::http",
            "crate::read",
            "crate::export",
            "crate::watchlist",
            "crate::poller",
        ],
    );
    never_imports(
        "store",
        &[
            "crate::poller",
            "crate::api",
            "crate::projection",
            "crate::read",
            "crate::readmodel",
            "crate::lease",
            "crate::budget",
            "crate::checkpoint::set_by_hand",
        ],
    );
    // One door to the read models: the readers import `readmodel`, never a builder,
    // and never the writer's modules.
    for reader in ["read", "api", "web", "export", "watchlist"] {
        never_imports(
            reader,
            &[
                "crate::projection",
                "crate::poller",
                "crate::lease",
                "crate::budget",
            ],
        );
    }
    never_imports(
        "readmodel",
        &[
            "crate::projection",
            "crate::store::Store::",
            "crate::read",
            "crate::api",
            "crate::web",
            "crate::export",
            "crate::watchlist",
            "crate::poller",
            "crate::lease",
            "crate::budget",
        ],
    );
    // The writer's side knows nothing of the readers.
    never_imports(
        "poller",
        &[
            "crate::projection",
            "crate::read",
            "crate::api",
            "crate::web",
            "crate::export",
            "crate::watchlist",
        ],
    );
    // The contracts at the bottom: the checkpoint's rules know neither the store nor the
    // lease; the mask is a function of its key and knows no store.
    never_imports("checkpoint.rs", &["crate::store", "crate::lease"]);
    never_imports(
        "privacy.rs",
        &["crate::store", "crate::lease", "crate::poller"],
    );
    // What an operator sees is read from the store's records (and the lease through a
    // read-only view): status never imports the writer's lease, budget or poller.
    never_imports(
        "status.rs",
        &["crate::lease", "crate::budget", "crate::poller"],
    );
    never_imports("source", &["crate::store", "crate::poller"]);
    never_imports(
        "watchlist",
        &[
            "crate::source",
            "crate::poller",
            "crate::api",
            "crate::web",
            "crate::http",
        ],
    );
}

/// No circle through the OpenAPI document: it imports the handlers (for their
/// operations) and the answer schemas; neither imports it back.
#[test]
fn the_openapi_document_is_imported_by_no_handler() {
    for p in sources(&root().join("src").join("api")) {
        let r = rel(&p);
        if r == "api/openapi.rs" || r == "api/mod.rs" {
            continue;
        }
        let code: String = std::fs::read_to_string(&p)
            .unwrap()
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        for f in ["super::openapi", "crate::api::openapi", "api::openapi::"] {
            assert!(!code.contains(f), "{r} imports the OpenAPI document ({f})");
        }
    }
    let schema = std::fs::read_to_string(root().join("src/api/schema.rs")).unwrap();
    for handler in [
        "cases",
        "events",
        "search",
        "subjects",
        "lookup",
        "stats",
        "health",
        "watchlists",
    ] {
        assert!(
            !schema.contains(&format!("super::{handler}")),
            "api/schema.rs imports the handler {handler}"
        );
    }
}

/// The names index and the parties builder import one way: the parties builder writes
/// the index (`super::names`); the index takes the person's document from `readmodel`.
#[test]
fn the_name_index_does_not_import_the_parties_builder() {
    let names = std::fs::read_to_string(root().join("src/projection/names.rs")).unwrap();
    let code: String = names
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        !code.contains("super::parties") && !code.contains("projection::parties"),
        "projection/names.rs imports the parties builder"
    );
}
