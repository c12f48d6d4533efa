//! The one table writer of the experiments: a table is a header and rows
//! of cells, printed as aligned text for the terminal, as Markdown for
//! OUT/*.md, or as CSV for the raw samples.

use std::path::{Path, PathBuf};

/// A table or CSV file could not be written.
#[derive(Debug, thiserror::Error)]
#[error("cannot write {}: {source}", path.display())]
pub struct TableError {
    path: PathBuf,
    source: std::io::Error,
}

/// A header and rows of text cells (a short row is padded with empty
/// cells), and notes: rows of a name and one sentence that spans the other
/// columns (a system that was not measured, and why).
#[derive(Clone, Debug, Default)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
    /// Indexes into `rows` of the notes (each a row of two cells).
    notes: Vec<usize>,
}

impl Table {
    /// A table with these column names and no rows.
    pub fn new<S: Into<String>>(header: impl IntoIterator<Item = S>) -> Table {
        Table { header: header.into_iter().map(Into::into).collect(), rows: Vec::new(), notes: Vec::new() }
    }

    /// Adds a row.
    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) -> &mut Table {
        self.rows.push(cells.into_iter().map(Into::into).collect());
        self
    }

    /// Adds a note: `name` in the first column, `text` across the others.
    pub fn note(&mut self, name: impl Into<String>, text: impl Into<String>) -> &mut Table {
        self.notes.push(self.rows.len());
        self.rows.push(vec![name.into(), text.into()]);
        self
    }

    fn is_note(&self, i: usize) -> bool {
        self.notes.contains(&i)
    }

    fn width(&self) -> usize {
        self.rows.iter().map(Vec::len).chain([self.header.len()]).max().unwrap_or(0)
    }

    fn cell(row: &[String], i: usize) -> &str {
        row.get(i).map(String::as_str).unwrap_or("")
    }

    /// Columns padded to their widest cell, the first left-aligned (names)
    /// and the others right-aligned (numbers), two spaces apart.
    pub fn text(&self) -> String {
        let n = self.width();
        let cells = self.rows.iter().enumerate().filter(|(i, _)| !self.is_note(*i)).map(|(_, r)| r);
        let widths: Vec<usize> = (0..n).map(|i| cells.clone().chain([&self.header]).map(|r| Self::cell(r, i).chars().count()).max().unwrap_or(0)).collect();
        let line = |r: &[String]| {
            let cells: Vec<String> = (0..n)
                .map(|i| {
                    let (c, w) = (Self::cell(r, i), widths[i]);
                    if i == 0 {
                        format!("{c:<w$}")
                    } else {
                        format!("{c:>w$}")
                    }
                })
                .collect();
            format!("{}\n", cells.join("  ").trim_end())
        };
        let note = |r: &[String]| format!("{:<w$}  {}\n", Self::cell(r, 0), Self::cell(r, 1), w = widths.first().copied().unwrap_or(0));
        let rows = self.rows.iter().enumerate().map(|(i, r)| if self.is_note(i) { note(r) } else { line(r) });
        std::iter::once(line(&self.header)).chain(rows).collect()
    }

    /// A Markdown table.
    pub fn markdown(&self) -> String {
        let n = self.width();
        let line = |r: &[String]| format!("| {} |\n", (0..n).map(|i| Self::cell(r, i)).collect::<Vec<_>>().join(" | "));
        let mut s = line(&self.header);
        s.push_str(&format!("|{}|\n", vec!["---"; n].join("|")));
        for r in &self.rows {
            s.push_str(&line(r));
        }
        s
    }

    /// CSV text (RFC 4180 quoting where a cell needs it).
    pub fn csv(&self) -> String {
        let quote = |c: &str| if c.contains([',', '"', '\n']) { format!("\"{}\"", c.replace('"', "\"\"")) } else { c.to_string() };
        let line = |r: &[String]| format!("{}\n", r.iter().map(|c| quote(c)).collect::<Vec<_>>().join(","));
        std::iter::once(line(&self.header)).chain(self.rows.iter().map(|r| line(r))).collect()
    }

    /// Writes [`Table::csv`] to `path`.
    pub fn write_csv(&self, path: &Path) -> Result<(), TableError> {
        write(path, &self.csv())
    }
}

/// A Markdown table of `header` and `rows`.
pub fn markdown(header: &[String], rows: &[Vec<String>]) -> String {
    Table { header: header.to_vec(), rows: rows.to_vec(), notes: Vec::new() }.markdown()
}

/// Writes `text` to `path` (a table, a CSV, a Markdown report).
pub fn write(path: &Path, text: &str) -> Result<(), TableError> {
    std::fs::write(path, text).map_err(|source| TableError { path: path.to_path_buf(), source })
}

/// Writes a CSV file of a header line and rows already joined by commas
/// (raw samples, whose cells never need quoting).
pub fn write_csv_lines(path: &Path, header: &str, rows: &[String]) -> Result<(), TableError> {
    let mut s = String::from(header);
    s.push('\n');
    for r in rows {
        s.push_str(r);
        s.push('\n');
    }
    write(path, &s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_text_markdown_and_csv() {
        let mut t = Table::new(["system", "ms"]);
        t.row(["spt", "1.5"]).row(["native", "10.25"]);
        assert_eq!(t.text(), "system     ms\nspt       1.5\nnative  10.25\n");
        assert_eq!(t.markdown(), "| system | ms |\n|---|---|\n| spt | 1.5 |\n| native | 10.25 |\n");
        t.row(["a,b", "say \"x\""]);
        assert!(t.csv().ends_with("\"a,b\",\"say \"\"x\"\"\"\n"), "{}", t.csv());
    }
}
