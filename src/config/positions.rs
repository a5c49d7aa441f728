//! Where each field of a config file is, for the messages made after
//! validation from the model alone (`secgw check`'s warnings, SA binding
//! and core errors): they name the file, line, column and field like a
//! validation [`super::Problem`] does.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use super::Config;
use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use toml::Spanned;
use zeroize::Zeroize;

/// Field path (`gateway.cores[0]`, `sa[1].worker`, `route[2]`; 0-based
/// indices in file order, as in [`super::Problem::field`]) → 1-based
/// (line, column) of its value in the file: for a `[table]` or `[[array]]`
/// entry, where the table starts. Empty when the positions are unknown.
///
/// Not kept in [`super::Config`]: a path string per field would cost about
/// as much memory again as a large config's SAs, for a few messages.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Positions(BTreeMap<String, (usize, usize)>);

impl Positions {
    /// Every field of TOML `text` (empty if it does not parse: a config
    /// that validated always does).
    pub(crate) fn of(text: &str) -> Positions {
        let mut map = BTreeMap::new();
        if let Ok(root) = toml::from_str::<Node>(text) {
            let starts = super::load::line_starts(text);
            walk(&root, "", &mut |path, offset| {
                map.insert(path, super::load::indexed_line_col(text, &starts, offset));
            });
        }
        Positions(map)
    }

    /// The positions of `cfg`'s fields, from its file read again
    /// (`cfg.source`; a `.cfg` is converted again with the options it was
    /// imported with, and its fields placed on its own lines). Empty when
    /// the file cannot be read or no longer converts; wrong (fields placed
    /// wrong, [`Positions::has`] wrong) only if it was edited since `cfg`
    /// was loaded.
    pub fn read(cfg: &Config) -> Positions {
        let Ok(text) = super::dpdk::read(&cfg.source) else {
            return Positions::default();
        };
        match &cfg.dpdk_import {
            None => Positions::of(&text),
            Some(opts) => super::dpdk::convert(&text, &cfg.source, opts).map(|imp| imp.positions()).unwrap_or_default(),
        }
    }

    /// The position of `field`, else of its nearest enclosing table that is
    /// in the file (a key left to its default: its table), else `None`.
    /// An array element that is not in the file (`sa[4]` of a config whose
    /// SAs were changed after loading) has none: it is not placed at its
    /// array.
    pub fn get(&self, field: &str) -> Option<(usize, usize)> {
        let mut f = field;
        loop {
            if let Some(&p) = self.0.get(f) {
                return Some(p);
            }
            let cut = f.rfind(['.', '['])?;
            if f[cut..].starts_with('[') {
                return None;
            }
            f = &f[..cut];
        }
    }

    /// True when the file sets `field` itself (a key left to its default
    /// is not in the file; unknown positions: false).
    pub fn has(&self, field: &str) -> bool {
        self.0.contains_key(field)
    }

    /// The same fields at the lines `line` maps them to (column 1), those
    /// it maps to `None` left out: a `.cfg` import's positions, from those
    /// of the TOML it was converted to.
    pub(crate) fn map_lines(self, line: impl Fn(usize) -> Option<usize>) -> Positions {
        Positions(self.0.into_iter().filter_map(|(k, (l, _))| Some((k, (line(l)?, 1)))).collect())
    }

    /// `file:line:column: field` (or `file: field` when the position is
    /// unknown), the prefix of a message about `field` of the config read
    /// from `file`.
    pub fn locate<'a>(&'a self, file: &'a Path, field: &'a str) -> Located<'a> {
        Located { file, field, at: self.get(field) }
    }
}

/// See [`Positions::locate`].
pub struct Located<'a> {
    file: &'a Path,
    field: &'a str,
    at: Option<(usize, usize)>,
}

impl fmt::Display for Located<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.at {
            Some((line, column)) => write!(f, "{}:{line}:{column}: {}", self.file.display(), self.field),
            None => write!(f, "{}: {}", self.file.display(), self.field),
        }
    }
}

/// Calls `out(path, byte offset)` for every table entry and array element
/// under `node` (whose path is `prefix`).
fn walk(node: &Node, prefix: &str, out: &mut impl FnMut(String, usize)) {
    match node {
        Node::Leaf => {}
        Node::Table(entries) => {
            for (k, v) in entries {
                let path = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                out(path.clone(), v.span().start);
                walk(v.get_ref(), &path, out);
            }
        }
        Node::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                let path = format!("{prefix}[{i}]");
                out(path.clone(), v.span().start);
                walk(v.get_ref(), &path, out);
            }
        }
    }
}

/// A TOML value keeping the span of every table entry and array element.
enum Node {
    Leaf,
    Array(Vec<Spanned<Node>>),
    Table(Vec<(String, Spanned<Node>)>),
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a TOML value")
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Node, E> {
        Ok(Node::Leaf)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Node, E> {
        Ok(Node::Leaf)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Node, E> {
        Ok(Node::Leaf)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Node, E> {
        Ok(Node::Leaf)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Node, E> {
        Ok(Node::Leaf)
    }
    /// toml hands strings over owned: a key's hex is wiped, not just freed
    /// (README, "keys are zeroized").
    fn visit_string<E: de::Error>(self, mut v: String) -> Result<Node, E> {
        v.zeroize();
        Ok(Node::Leaf)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Spanned<Node>>()? {
            items.push(item);
        }
        Ok(Node::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            // toml hands a datetime over as a one-entry map with a private key.
            if key == "$__toml_private_datetime" {
                map.next_value::<IgnoredAny>()?;
                return Ok(Node::Leaf);
            }
            entries.push((key, map.next_value::<Spanned<Node>>()?));
        }
        Ok(Node::Table(entries))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# c\n[gateway]\nname = \"g\"\ncores = [0, 1]\n\n[[sa]]\nspi = 1\n\n[[sa]]\nspi = 2\nwhen = 1979-05-27T07:32:00Z\n";

    #[test]
    fn fields_tables_and_elements() {
        let p = Positions::of(TEXT);
        assert_eq!(p.get("gateway.name"), Some((3, 8)));
        assert_eq!(p.get("gateway.cores"), Some((4, 9)));
        assert_eq!(p.get("gateway.cores[1]"), Some((4, 13)));
        assert_eq!(p.get("sa[1].spi"), Some((10, 7)));
        assert_eq!(p.get("sa[1].when"), Some((11, 8)));
        // A key not in the file: its table.
        assert_eq!(p.get("gateway.workers"), p.get("gateway"));
        assert_eq!(p.get("sa[1].worker"), p.get("sa[1]"));
        assert!(p.get("sa[1]").is_some_and(|(l, _)| (9..=10).contains(&l)), "{:?}", p.get("sa[1]"));
        assert_eq!(p.get("route[0].via"), None);
        // An element not in the file is not placed at its array.
        assert_eq!(p.get("sa[2]"), None);
        assert_eq!(p.get("sa[2].worker"), None);
        assert_eq!(p.get("gateway.cores[2]"), None);
        assert_eq!(Positions::of("not = [toml").get("not"), None);
    }

    #[test]
    fn located_and_mapped() {
        let p = Positions::of(TEXT);
        let f = Path::new("c.toml");
        assert_eq!(p.locate(f, "gateway.cores[1]").to_string(), "c.toml:4:13: gateway.cores[1]");
        assert_eq!(p.locate(f, "route[0]").to_string(), "c.toml: route[0]");
        let m = p.map_lines(|l| (l == 10).then_some(7));
        assert_eq!(m.get("sa[1].spi"), Some((7, 1)));
        assert_eq!(m.get("gateway.name"), None);
    }
}
