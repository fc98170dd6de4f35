//! Jane Austen's six novels as paragraphs (`engram data fetch austen`): the R package
//! `janeaustenr` (Silge 2017; Debian's `r-cran-janeaustenr`) holds them as one row a printed line,
//! `austen_books()` giving `text` and `book` columns, a blank `text` between paragraphs. R
//! writes them as CSV (`write.csv`); [`paragraphs`] joins them back.

use engram_core::{Error, Result};

/// The fewest words (runs of non-white-space) a paragraph keeps: shorter ones are headings
/// ("CHAPTER 1"), signatures and one-line exchanges of dialogue, which say little about the
/// novel.
pub const MIN_WORDS: usize = 20;

/// The paragraphs of the CSV `csv` (a header row naming `text` and `book`, in any order and
/// among other columns), as `(paragraph, book)` in order: the consecutive non-blank lines of
/// one book joined by single spaces (each line trimmed), a paragraph ending at a blank line or
/// where the book changes, and only paragraphs of at least [`MIN_WORDS`] words kept.
///
/// # Errors
/// [`Error::Data`] naming `what` when the CSV does not parse or lacks a `text` or `book`
/// column.
pub fn paragraphs(csv: &[u8], what: &str) -> Result<Vec<(String, String)>> {
    let bad = |e: csv::Error| Error::Data(format!("{what}: not CSV: {e}"));
    let mut reader = csv::ReaderBuilder::new().flexible(false).from_reader(csv);
    let headers = reader.headers().map_err(bad)?.clone();
    let column = |name: &str| {
        headers.iter().position(|h| h == name).ok_or_else(|| {
            Error::Data(format!(
                "{what}: no `{name}` column (columns: {})",
                headers.iter().collect::<Vec<_>>().join(", ")
            ))
        })
    };
    let (text, book) = (column("text")?, column("book")?);
    let mut out = Vec::new();
    let mut current: Option<(Vec<String>, String)> = None;
    let mut flush = |cur: &mut Option<(Vec<String>, String)>| {
        if let Some((lines, book)) = cur.take() {
            let para = lines.join(" ");
            if para.split_whitespace().count() >= MIN_WORDS {
                out.push((para, book));
            }
        }
    };
    for row in reader.records() {
        let row = row.map_err(bad)?;
        let (line, b) = (
            row.get(text).unwrap_or("").trim(),
            row.get(book).unwrap_or(""),
        );
        if current.as_ref().is_some_and(|(_, cb)| cb != b) || line.is_empty() {
            flush(&mut current);
        }
        if !line.is_empty() {
            current
                .get_or_insert_with(|| (Vec::new(), b.to_string()))
                .0
                .push(line.to_string());
        }
    }
    flush(&mut current);
    Ok(out)
}
