//! Expressions generated at random from a seed, well-typed by construction, over the variable
//! sets of variables.json: where the corpus and the systematic cases miss what nobody thought
//! of. Each expression is a tree of typed nodes, so that a difference can be shrunk to a small
//! reproducer by replacing a node with one of its children of the same type, or with a leaf.
//!
//! The generator knows the shapes of the variable sets (`object` of `pod`, `deployment`,
//! `groups` and `widget`, a custom resource with floats, int-or-strings, free-form fields and
//! lists of objects; `request`, `namespaceObject`, `params` and `oldObject` where they have them), and
//! the functions of kube-apiserver 1.35's base environment: the standard library,
//! strings, lists, sets, quantities, optionals, two-variable comprehensions, durations and
//! timestamps, format. Any node may be written as an admission policy's variable, defined
//! before the variables that read it and read where it stands as `variables.<name>`; shrinking
//! also writes a variable back in place.

use crate::corpus::Case;

/// A small, fast, seedable generator (SplitMix64): the same seed gives the same expressions on
/// every machine.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// The types the generator builds expressions of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ty {
    Bool,
    Int,
    Uint,
    Double,
    Str,
    ListInt,
    ListStr,
    MapStrInt,
    Duration,
    Timestamp,
    Quantity,
    OptStr,
    /// A field of an object: `dyn` when checked, whatever JSON holds there.
    Dyn,
}

const TYPES: [Ty; 12] = [
    Ty::Bool,
    Ty::Int,
    Ty::Uint,
    Ty::Double,
    Ty::Str,
    Ty::ListInt,
    Ty::ListStr,
    Ty::MapStrInt,
    Ty::Duration,
    Ty::Timestamp,
    Ty::Quantity,
    Ty::OptStr,
];

/// A generated expression: a template whose `$0`, `$1`, … are its children.
#[derive(Debug, Clone)]
pub struct Node {
    pub ty: Ty,
    template: String,
    kids: Vec<Node>,
    /// Written as an admission policy's variable, read where the node stands as
    /// `variables.<name>`.
    variable: bool,
}

impl Node {
    fn leaf(ty: Ty, text: &str) -> Node {
        Node {
            ty,
            template: text.to_owned(),
            kids: Vec::new(),
            variable: false,
        }
    }

    fn call(ty: Ty, template: &str, kids: Vec<Node>) -> Node {
        Node {
            ty,
            template: template.to_owned(),
            kids,
            variable: false,
        }
    }

    /// The expression's text, and the variables it reads, each defined before the ones that
    /// read it (`v0`, `v1`, … in that order).
    pub fn composed(&self) -> (String, Vec<(String, String)>) {
        let mut definitions = Vec::new();
        let text = self.render(&mut definitions);
        (text, definitions)
    }

    fn render(&self, definitions: &mut Vec<(String, String)>) -> String {
        let mut out = self.template.clone();
        // The children first, so that a variable inside this one is defined before it.
        let kids: Vec<String> = self
            .kids
            .iter()
            .map(|kid| kid.render(definitions))
            .collect();
        // Highest index first, so that `$1` is not taken for the start of `$10`.
        for (index, kid) in kids.iter().enumerate().rev() {
            out = out.replace(&format!("${index}"), &format!("({kid})"));
        }
        if !self.variable {
            return out;
        }
        let name = format!("v{}", definitions.len());
        definitions.push((name.clone(), out));
        format!("variables.{name}")
    }

    /// The case of this expression over the variable set `vars`, its id naming its variables.
    pub fn case(&self, vars: &str) -> Case {
        let (expr, definitions) = self.composed();
        let mut id = format!("[{vars}] {expr}");
        if !definitions.is_empty() {
            let defined: Vec<String> = definitions
                .iter()
                .map(|(name, definition)| format!("{name} = {definition}"))
                .collect();
            id.push_str(&format!(" where {}", defined.join("; ")));
        }
        Case {
            id,
            category: "random".to_owned(),
            expr,
            vars: vars.to_owned(),
            definitions,
        }
    }

    /// Makes `count` of its nodes (at random, the root among them) variables.
    fn mark(&mut self, rng: &mut Rng, count: usize) {
        for _ in 0..count {
            let chosen = rng.below(self.size());
            self.nth(chosen).variable = true;
        }
    }

    /// The `index`-th node in preorder.
    fn nth(&mut self, index: usize) -> &mut Node {
        if index == 0 {
            return self;
        }
        let mut rest = index - 1;
        for kid in &mut self.kids {
            let size = kid.size();
            if rest < size {
                return kid.nth(rest);
            }
            rest -= size;
        }
        unreachable!("a node index within the tree's size")
    }

    /// How many nodes it has.
    pub fn size(&self) -> usize {
        1 + self.kids.iter().map(Node::size).sum::<usize>()
    }

    /// Every tree one step smaller: a node replaced by one of its children of its own type, or
    /// by the plainest leaf of its type.
    pub fn smaller(&self) -> Vec<Node> {
        let mut out = Vec::new();
        if self.variable {
            // The variable's expression written in place.
            let mut inline = self.clone();
            inline.variable = false;
            out.push(inline);
        }
        for kid in &self.kids {
            if kid.ty == self.ty {
                out.push(kid.clone());
            }
        }
        if !self.kids.is_empty() {
            out.push(plain_leaf(self.ty));
        }
        for (index, kid) in self.kids.iter().enumerate() {
            for smaller in kid.smaller() {
                let mut copy = self.clone();
                copy.kids[index] = smaller;
                out.push(copy);
            }
        }
        out
    }
}

fn plain_leaf(ty: Ty) -> Node {
    let text = match ty {
        Ty::Bool => "true",
        Ty::Int => "1",
        Ty::Uint => "1u",
        Ty::Double => "1.5",
        Ty::Str => "'a'",
        Ty::ListInt => "[1, 2]",
        Ty::ListStr => "['a', 'b']",
        Ty::MapStrInt => "{'a': 1}",
        Ty::Duration => "duration('1s')",
        Ty::Timestamp => "timestamp('2024-03-01T12:30:45Z')",
        Ty::Quantity => "quantity('1')",
        Ty::OptStr => "optional.of('a')",
        Ty::Dyn => "object.metadata.name",
    };
    Node::leaf(ty, text)
}

/// The variable sets random expressions run over, and fields of their objects by what JSON
/// holds there.
pub const SETS: [&str; 4] = ["pod", "deployment", "groups", "widget"];

const DYN_STRINGS: [&str; 10] = [
    "object.spec.mode",
    "object.spec.port",
    "object.spec.quota",
    "object.spec.items[1].name",
    "object.metadata.name",
    "object.metadata.namespace",
    "object.kind",
    "object.apiVersion",
    "object.spec.containers[0].image",
    "object.spec.containers[0].name",
];
const DYN_NUMBERS: [&str; 8] = [
    "object.spec.size",
    "object.spec.ratio",
    "object.spec.weight",
    "object.spec.extra.depth.n.m",
    "object.spec.securityContext.runAsUser",
    "object.spec.securityContext.supplementalGroups[0]",
    "object.spec.replicas",
    "object.spec.containers[0].ports[0].containerPort",
];
const DYN_LISTS: [&str; 7] = [
    "object.spec.items",
    "object.spec.limits.cpu",
    "object.spec.extra.free",
    "object.spec.containers",
    "object.spec.securityContext.supplementalGroups",
    "object.spec.containers[0].ports",
    "object.spec.template.spec.containers",
];
const DYN_MAPS: [&str; 5] = [
    "object.spec.limits",
    "object.spec.items[0]",
    "object.metadata.labels",
    "object.metadata.annotations",
    "object.spec.selector.matchLabels",
];

/// Fields of the other variables an admission expression reads: `request` and
/// `namespaceObject` typed as kube-apiserver types them, `params` and `oldObject` dyn (null in
/// the sets that leave them out).
const OTHER_VARIABLES: [&str; 14] = [
    "request.operation",
    "request.userInfo.username",
    "request.userInfo.groups",
    "request.userInfo.extra",
    "request.kind",
    "request.dryRun",
    "request.namespace",
    "namespaceObject.metadata.labels",
    "namespaceObject.metadata.name",
    "namespaceObject.spec.finalizers",
    "namespaceObject.status.phase",
    "params.data",
    "params.data.maxReplicas",
    "oldObject.spec.replicas",
];

/// Generates one expression of a random type.
pub fn expression(rng: &mut Rng, depth: usize) -> Node {
    let ty = *rng.pick(&TYPES);
    generate(rng, ty, depth)
}

fn generate(rng: &mut Rng, ty: Ty, depth: usize) -> Node {
    if depth == 0 || rng.below(4) == 0 {
        return leaf(rng, ty);
    }
    let d = depth - 1;
    let g = |rng: &mut Rng, ty: Ty| generate(rng, ty, d);
    macro_rules! pick {
        ($($template:expr => [$($kid:expr),*]),+ $(,)?) => {{
            let choices: &[&dyn Fn(&mut Rng) -> Node] = &[$(&|rng: &mut Rng| {
                let kids = vec![$(g(rng, $kid)),*];
                Node::call(ty, $template, kids)
            }),+];
            let choice = rng.below(choices.len());
            choices[choice](rng)
        }};
    }
    match ty {
        Ty::Bool => pick![
            "$0 && $1" => [Ty::Bool, Ty::Bool],
            "$0 || $1" => [Ty::Bool, Ty::Bool],
            "!$0" => [Ty::Bool],
            "$0 < $1" => [Ty::Int, Ty::Int],
            "$0 <= $1" => [Ty::Double, Ty::Int],
            "$0 == $1" => [Ty::Int, Ty::Uint],
            "$0 != $1" => [Ty::Str, Ty::Str],
            "$0 > $1" => [Ty::Str, Ty::Str],
            "$0 == $1" => [Ty::Dyn, Ty::Str],
            "$0 == $1" => [Ty::ListInt, Ty::ListInt],
            "$0.startsWith($1)" => [Ty::Str, Ty::Str],
            "$0.endsWith($1)" => [Ty::Str, Ty::Str],
            "$0.contains($1)" => [Ty::Str, Ty::Str],
            "$0.matches('^[a-z0-9-]+$')" => [Ty::Str],
            "$0.exists(x, x > $1)" => [Ty::ListInt, Ty::Int],
            "$0.all(x, x.size() < $1)" => [Ty::ListStr, Ty::Int],
            "$0.exists_one(x, x == $1)" => [Ty::ListInt, Ty::Int],
            "$0 in $1" => [Ty::Int, Ty::ListInt],
            "$0 in $1" => [Ty::Str, Ty::MapStrInt],
            "$0.hasValue()" => [Ty::OptStr],
            "$0.isLessThan($1)" => [Ty::Quantity, Ty::Quantity],
            "$0.isInteger()" => [Ty::Quantity],
            "$0 == $1" => [Ty::Quantity, Ty::Quantity],
            "sets.contains($0, $1)" => [Ty::ListInt, Ty::ListInt],
            "sets.intersects($0, $1)" => [Ty::ListStr, Ty::ListStr],
            "$0 < $1" => [Ty::Timestamp, Ty::Timestamp],
            "$0 > $1" => [Ty::Duration, Ty::Duration],
            "$0 ? $1 : $2" => [Ty::Bool, Ty::Bool, Ty::Bool],
            "$0.all(k, v, v > $1)" => [Ty::MapStrInt, Ty::Int],
            "has(object.metadata.labels) && $0" => [Ty::Bool],
        ],
        Ty::Int => pick![
            "$0 + $1" => [Ty::Int, Ty::Int],
            "$0 - $1" => [Ty::Int, Ty::Int],
            "$0 * $1" => [Ty::Int, Ty::Int],
            "$0 / $1" => [Ty::Int, Ty::Int],
            "$0 % $1" => [Ty::Int, Ty::Int],
            "-$0" => [Ty::Int],
            "size($0)" => [Ty::Str],
            "size($0)" => [Ty::ListStr],
            "$0.size()" => [Ty::MapStrInt],
            "$0.indexOf($1)" => [Ty::Str, Ty::Str],
            "$0.lastIndexOf($1)" => [Ty::ListInt, Ty::Int],
            "$0.sum()" => [Ty::ListInt],
            "$0.min()" => [Ty::ListInt],
            "$0.max()" => [Ty::ListInt],
            "int($0)" => [Ty::Double],
            "int($0)" => [Ty::Uint],
            "int($0)" => [Ty::Dyn],
            "$0[$1]" => [Ty::ListInt, Ty::Int],
            "$0[$1]" => [Ty::MapStrInt, Ty::Str],
            "$0.asInteger()" => [Ty::Quantity],
            "$0.compareTo($1)" => [Ty::Quantity, Ty::Quantity],
            "$0.sign()" => [Ty::Quantity],
            "$0.getSeconds()" => [Ty::Duration],
            "$0.getFullYear()" => [Ty::Timestamp],
            "$0.getHours('Europe/Paris')" => [Ty::Timestamp],
            "$0 ? $1 : $2" => [Ty::Bool, Ty::Int, Ty::Int],
            "math.greatest($0, $1)" => [Ty::Int, Ty::Int],
            "$0.reverse()[0]" => [Ty::Dyn],
        ],
        Ty::Uint => pick![
            "$0 + $1" => [Ty::Uint, Ty::Uint],
            "$0 - $1" => [Ty::Uint, Ty::Uint],
            "$0 * $1" => [Ty::Uint, Ty::Uint],
            "$0 / $1" => [Ty::Uint, Ty::Uint],
            "uint($0)" => [Ty::Int],
            "uint($0)" => [Ty::Double],
            "uint($0)" => [Ty::Dyn],
            "$0 ? $1 : $2" => [Ty::Bool, Ty::Uint, Ty::Uint],
        ],
        Ty::Double => pick![
            "$0 + $1" => [Ty::Double, Ty::Double],
            "$0 - $1" => [Ty::Double, Ty::Double],
            "$0 * $1" => [Ty::Double, Ty::Double],
            "$0 / $1" => [Ty::Double, Ty::Double],
            "-$0" => [Ty::Double],
            "double($0)" => [Ty::Int],
            "double($0)" => [Ty::Uint],
            "double($0)" => [Ty::Str],
            "double($0)" => [Ty::Dyn],
            "$0.asApproximateFloat()" => [Ty::Quantity],
            "[$0, $1].sum()" => [Ty::Double, Ty::Double],
            "[$0, $1].max()" => [Ty::Double, Ty::Double],
            "$0 ? $1 : $2" => [Ty::Bool, Ty::Double, Ty::Double],
            "math.least($0, $1)" => [Ty::Double, Ty::Double],
        ],
        Ty::Str => pick![
            "$0 + $1" => [Ty::Str, Ty::Str],
            "$0.lowerAscii()" => [Ty::Str],
            "$0.upperAscii()" => [Ty::Str],
            "$0.trim()" => [Ty::Str],
            "$0.replace($1, $2)" => [Ty::Str, Ty::Str, Ty::Str],
            "$0.substring($1)" => [Ty::Str, Ty::Int],
            "$0.charAt($1)" => [Ty::Str, Ty::Int],
            "$0.join($1)" => [Ty::ListStr, Ty::Str],
            "$0.reverse()" => [Ty::Str],
            "string($0)" => [Ty::Int],
            "string($0)" => [Ty::Uint],
            "string($0)" => [Ty::Double],
            "string($0)" => [Ty::Bool],
            "string($0)" => [Ty::Dyn],
            "string($0)" => [Ty::Duration],
            "string($0)" => [Ty::Timestamp],
            "'%s/%d'.format([$0, $1])" => [Ty::Str, Ty::Int],
            "'%.2f and %e'.format([$0, $1])" => [Ty::Double, Ty::Double],
            "'%s'.format([$0])" => [Ty::ListInt],
            "'%x %o %b'.format([$0, $1, $2])" => [Ty::Int, Ty::Uint, Ty::Int],
            "$0.orValue($1)" => [Ty::OptStr, Ty::Str],
            "$0 ? $1 : $2" => [Ty::Bool, Ty::Str, Ty::Str],
            "$0.split($1).join('|')" => [Ty::Str, Ty::Str],
            "$0.quote()" => [Ty::Str],
        ],
        Ty::ListInt => pick![
            "$0 + $1" => [Ty::ListInt, Ty::ListInt],
            "$0.filter(x, x % 2 == $1)" => [Ty::ListInt, Ty::Int],
            "$0.map(x, x * $1)" => [Ty::ListInt, Ty::Int],
            "$0.map(x, x > $1, x)" => [Ty::ListInt, Ty::Int],
            "$0.reverse()" => [Ty::ListInt],
            "$0.distinct()" => [Ty::ListInt],
            "$0.sort()" => [Ty::ListInt],
            "$0.sortBy(x, -x)" => [Ty::ListInt],
            "$0.slice(0, 1)" => [Ty::ListInt],
            "[$0, $1].flatten()" => [Ty::ListInt, Ty::ListInt],
            "lists.range($0 % 5)" => [Ty::Int],
            "$0.transformList(i, v, v + i)" => [Ty::ListInt],
            "$0.map(s, size(s))" => [Ty::ListStr],
            "[$0, $1, $2]" => [Ty::Int, Ty::Int, Ty::Int],
            "$0 ? $1 : $2" => [Ty::Bool, Ty::ListInt, Ty::ListInt],
        ],
        Ty::ListStr => pick![
            "$0 + $1" => [Ty::ListStr, Ty::ListStr],
            "$0.split($1)" => [Ty::Str, Ty::Str],
            "$0.filter(s, s.size() > $1)" => [Ty::ListStr, Ty::Int],
            "$0.map(x, string(x))" => [Ty::ListInt],
            "$0.sort()" => [Ty::ListStr],
            "$0.distinct()" => [Ty::ListStr],
            "[$0, $1]" => [Ty::Str, Ty::Str],
            "$0.map(k, k)" => [Ty::MapStrInt],
            "$0.map(c, c.name)" => [Ty::Dyn],
        ],
        Ty::MapStrInt => pick![
            "{'a': $0, 'b': $1}" => [Ty::Int, Ty::Int],
            "{$0: $1}" => [Ty::Str, Ty::Int],
            "$0.transformMap(k, v, v + 1)" => [Ty::MapStrInt],
            "$0.transformMapEntry(k, v, {k + 'x': v})" => [Ty::MapStrInt],
        ],
        Ty::Duration => pick![
            "$0 + $1" => [Ty::Duration, Ty::Duration],
            "$0 - $1" => [Ty::Duration, Ty::Duration],
            "duration($0)" => [Ty::Str],
            "$0 - $1" => [Ty::Timestamp, Ty::Timestamp],
        ],
        Ty::Timestamp => pick![
            "$0 + $1" => [Ty::Timestamp, Ty::Duration],
            "$0 - $1" => [Ty::Timestamp, Ty::Duration],
            "timestamp($0)" => [Ty::Dyn],
        ],
        Ty::Quantity => pick![
            "$0.add($1)" => [Ty::Quantity, Ty::Quantity],
            "$0.sub($1)" => [Ty::Quantity, Ty::Int],
            "$0.add($1)" => [Ty::Quantity, Ty::Int],
            "quantity($0)" => [Ty::Dyn],
        ],
        Ty::OptStr => pick![
            "$0.or($1)" => [Ty::OptStr, Ty::OptStr],
            "optional.ofNonZeroValue($0)" => [Ty::Str],
            "$0[?$1]" => [Ty::Dyn, Ty::Str],
            "$0.optMap(s, s + $1)" => [Ty::OptStr, Ty::Str],
            "$0.split(',')[?$1]" => [Ty::Str, Ty::Int],
        ],
        Ty::Dyn => leaf(rng, Ty::Dyn),
    }
}

fn leaf(rng: &mut Rng, ty: Ty) -> Node {
    let text: String = match ty {
        Ty::Bool => rng
            .pick(&[
                "true",
                "false",
                "has(object.metadata.labels)",
                "'app' in object.metadata.labels",
            ])
            .to_string(),
        Ty::Int => rng
            .pick(&[
                "0",
                "1",
                "-1",
                "7",
                "1000",
                "9223372036854775807",
                "-9223372036854775808",
                "size(object.spec.containers)",
            ])
            .to_string(),
        Ty::Uint => rng
            .pick(&["0u", "1u", "7u", "18446744073709551615u"])
            .to_string(),
        Ty::Double => rng
            .pick(&[
                "0.0",
                "-0.0",
                "1.5",
                "-2.25",
                "1e300",
                "0.1",
                "double('NaN')",
            ])
            .to_string(),
        Ty::Str => rng
            .pick(&[
                "''",
                "'a'",
                "'web'",
                "'Hello World'",
                "'a,b,,c'",
                "' x '",
                "'héllo'",
                "'1h'",
                "'app'",
                "object.metadata.name",
            ])
            .to_string(),
        Ty::ListInt => rng
            .pick(&[
                "[]",
                "[1, 2, 3]",
                "[3, 1, 2, 3]",
                "[-1, 0]",
                "object.spec.securityContext.supplementalGroups",
            ])
            .to_string(),
        Ty::ListStr => rng
            .pick(&["[]", "['b', 'a', 'c']", "['x']", "['', 'a']"])
            .to_string(),
        Ty::MapStrInt => rng
            .pick(&["{}", "{'a': 1, 'b': 2}", "{'z': -1}"])
            .to_string(),
        Ty::Duration => rng
            .pick(&[
                "duration('1h30m')",
                "duration('-5s')",
                "duration('0s')",
                "duration('1.5s')",
            ])
            .to_string(),
        Ty::Timestamp => rng
            .pick(&[
                "timestamp('2024-03-01T12:30:45Z')",
                "timestamp('1970-01-01T00:00:00Z')",
                "timestamp('2024-02-29T23:59:59.999Z')",
            ])
            .to_string(),
        Ty::Quantity => rng
            .pick(&[
                "quantity('5.1')",
                "quantity('1Ki')",
                "quantity('100m')",
                "quantity('0.5Gi')",
                "quantity('1e3')",
                "quantity('0')",
            ])
            .to_string(),
        Ty::OptStr => rng
            .pick(&[
                "optional.none()",
                "optional.of('v')",
                "object.metadata.?labels[?'app']",
                "object.?metadata.?namespace",
            ])
            .to_string(),
        Ty::Dyn => {
            let group: &[&str] = match rng.below(5) {
                0 => &DYN_STRINGS,
                1 => &DYN_NUMBERS,
                2 => &DYN_LISTS,
                3 => &DYN_MAPS,
                _ => &OTHER_VARIABLES,
            };
            rng.pick(group).to_string()
        }
    };
    Node::leaf(ty, &text)
}

/// `count` cases from `seed`: an expression each, over a variable set each, a third of them
/// reading some of their parts as an admission policy's variables; ids prefixed with `random `
/// so that they cannot be taken for the corpus's.
pub fn cases(seed: u64, count: usize) -> Vec<(Case, Node)> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::with_capacity(count);
    let mut seen = std::collections::HashSet::new();
    while out.len() < count {
        let mut node = expression(&mut rng, 4);
        let vars = *rng.pick(&SETS);
        if rng.below(3) == 0 {
            let count = 1 + rng.below(3);
            node.mark(&mut rng, count);
        }
        let case = node.case(vars);
        if case.id.contains("  # ") || !seen.insert(case.id.clone()) {
            continue;
        }
        out.push((case, node));
    }
    out
}
