//! Text tables sized to their content, as `kanon audit` prints them.

use std::borrow::Cow;

/// The widest a column of names is padded to, in characters: a longer cell (a long object
/// name) runs on in its own row, shifting the cells after it, instead of widening every row.
pub const MAX_WIDTH: usize = 64;

/// Columns are separated by this.
const GAP: &str = "  ";

/// How a column's cells sit in its width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Text: padded on the right, except in the last column (never padded).
    Left,
    /// Numbers: padded on the left.
    Right,
}

/// A table: a header and rows of as many cells, one alignment per column.
pub struct Table<'a> {
    pub header: &'a [&'a str],
    pub align: &'a [Align],
    /// The widest a column is padded to ([`MAX_WIDTH`], or `usize::MAX`: as wide as its
    /// widest cell, whatever it is).
    pub cap: usize,
    pub rows: Vec<Vec<String>>,
}

impl Table<'_> {
    /// The lines of the table, its header first: each column as wide as its widest cell (at
    /// most the cap), control characters (a message's line breaks) shown as spaces.
    pub fn lines(&self) -> Vec<String> {
        let header: Vec<Cow<'_, str>> = self.header.iter().map(|h| Cow::Borrowed(*h)).collect();
        let rows: Vec<Vec<Cow<'_, str>>> = self
            .rows
            .iter()
            .map(|row| row.iter().map(|cell| printable(cell)).collect())
            .collect();
        let widths = self.widths(std::iter::once(&header).chain(&rows));
        std::iter::once(&header)
            .chain(&rows)
            .map(|row| self.line(row, &widths))
            .collect()
    }

    fn widths<'r>(&self, rows: impl Iterator<Item = &'r Vec<Cow<'r, str>>>) -> Vec<usize> {
        let mut widths = vec![0; self.header.len()];
        for row in rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count().min(self.cap));
            }
        }
        widths
    }

    fn line(&self, row: &[Cow<'_, str>], widths: &[usize]) -> String {
        let last = row.len().saturating_sub(1);
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .zip(self.align)
            .enumerate()
            .map(|(at, ((cell, &width), align))| match align {
                Align::Right => format!("{cell:>width$}"),
                Align::Left if at == last => cell.to_string(),
                Align::Left => format!("{cell:<width$}"),
            })
            .collect();
        cells.join(GAP)
    }
}

/// `cell` with its control characters (line breaks, tabs, escapes) as spaces: one cell, one
/// line, nothing an object's data could use to drive the terminal.
fn printable(cell: &str) -> Cow<'_, str> {
    if cell.chars().any(char::is_control) {
        Cow::Owned(
            cell.chars()
                .map(|c| if c.is_control() { ' ' } else { c })
                .collect(),
        )
    } else {
        Cow::Borrowed(cell)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(cells: &[&str]) -> Vec<String> {
        cells.iter().map(|c| c.to_string()).collect()
    }

    #[test]
    fn columns_are_as_wide_as_their_widest_cell_and_the_last_is_not_padded() {
        let table = Table {
            header: &["RESULT", "OBJECT", "MESSAGE"],
            align: &[Align::Left, Align::Left, Align::Left],
            cap: MAX_WIDTH,
            rows: vec![
                row(&["fail", "shop/a-rather-long-name", "debug must be off"]),
                row(&["warn", "shop/b", "x"]),
            ],
        };
        assert_eq!(
            table.lines(),
            [
                "RESULT  OBJECT                   MESSAGE",
                "fail    shop/a-rather-long-name  debug must be off",
                "warn    shop/b                   x",
            ]
        );
    }

    #[test]
    fn numbers_are_aligned_right() {
        let table = Table {
            header: &["POLICY", "PASS", "FAIL"],
            align: &[Align::Left, Align::Right, Align::Right],
            cap: MAX_WIDTH,
            rows: vec![row(&["p", "1234567", "0"]), row(&["q", "5", "12"])],
        };
        assert_eq!(
            table.lines(),
            [
                "POLICY     PASS  FAIL",
                "p       1234567     0",
                "q             5    12",
            ]
        );
    }

    #[test]
    fn a_cell_past_the_widest_column_runs_on_in_its_row_alone() {
        let long = "n".repeat(MAX_WIDTH + 10);
        let table = Table {
            header: &["OBJECT", "POLICY"],
            align: &[Align::Left, Align::Left],
            cap: MAX_WIDTH,
            rows: vec![row(&[&long, "p"]), row(&["short", "q"])],
        };
        let lines = table.lines();
        assert_eq!(lines[1], format!("{long}  p"));
        assert_eq!(lines[2], format!("{:<MAX_WIDTH$}  q", "short"));
    }

    #[test]
    fn an_uncapped_column_is_as_wide_as_its_widest_cell() {
        let long = "p".repeat(MAX_WIDTH + 10);
        let table = Table {
            header: &["POLICY", "PASS"],
            align: &[Align::Left, Align::Right],
            cap: usize::MAX,
            rows: vec![row(&[&long, "1"]), row(&["q", "2"])],
        };
        let lines = table.lines();
        assert_eq!(lines[1], format!("{long}     1"));
        assert_eq!(
            lines[2],
            format!("{:<width$}     2", "q", width = MAX_WIDTH + 10)
        );
    }

    #[test]
    fn control_characters_are_shown_as_spaces() {
        let table = Table {
            header: &["RESULT", "MESSAGE"],
            align: &[Align::Left, Align::Left],
            cap: MAX_WIDTH,
            rows: vec![row(&["fail", "two\nlines\tand \u{1b}[31mred"])],
        };
        assert_eq!(table.lines()[1], "fail    two lines and  [31mred");
    }

    #[test]
    fn a_table_without_rows_is_its_header() {
        let table = Table {
            header: &["POLICY", "PASS"],
            align: &[Align::Left, Align::Right],
            cap: MAX_WIDTH,
            rows: Vec::new(),
        };
        assert_eq!(table.lines(), ["POLICY  PASS"]);
    }
}
