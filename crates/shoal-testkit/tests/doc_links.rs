//! Every relative link in README.md and docs/ names a file or directory
//! that exists, so the front door and the topic pages cannot point at code
//! or pages that moved away.

use std::path::{Path, PathBuf};

/// The repository's root: two levels above this crate.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The Markdown files under `dir`, recursively.
fn markdown_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            markdown_under(&path, out);
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
}

/// The targets of the inline links `[text](target)` of one Markdown text,
/// outside fenced code blocks and code spans, with their line numbers.
fn link_targets(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let mut fenced = false;
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Code spans can hold `](` that is no link: blank them out first.
        let mut plain = String::with_capacity(line.len());
        let mut in_code = false;
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
            }
            plain.push(if in_code { ' ' } else { c });
        }
        let mut rest = plain.as_str();
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let Some(end) = rest.find(')') else { break };
            let target = rest[..end].split_whitespace().next().unwrap_or("").to_string();
            found.push((n + 1, target));
            rest = &rest[end..];
        }
    }
    found
}

#[test]
fn every_relative_link_in_the_docs_resolves() {
    let root = root();
    let mut files = vec![root.join("README.md")];
    markdown_under(&root.join("docs"), &mut files);
    assert!(files.len() > 1, "no Markdown files found under {}", root.join("docs").display());
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
        let dir = file.parent().unwrap_or(&root);
        for (line, target) in link_targets(&text) {
            if target.is_empty() || target.starts_with('#') || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let path = target.split('#').next().unwrap_or("");
            checked += 1;
            if !dir.join(path).exists() {
                let shown = file.strip_prefix(&root).unwrap_or(file);
                broken.push(format!("{}:{line}: {target}", shown.display()));
            }
        }
    }
    assert!(checked > 0, "no relative links found: the link scanner is broken");
    assert!(broken.is_empty(), "relative links that name nothing:\n{}", broken.join("\n"));
}

#[test]
fn the_link_scanner_skips_code_and_finds_links() {
    let text = "see [a](docs/a.md) and `x](y)`\n```\n[b](nope)\n```\n[c](../c.rs#L3) [d](https://e)";
    let targets: Vec<String> = link_targets(text).into_iter().map(|(_, t)| t).collect();
    assert_eq!(targets, ["docs/a.md", "../c.rs#L3", "https://e"]);
}
