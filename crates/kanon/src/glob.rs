//! Shell-style globs, as `kanon test --suite/--case` and `kanon audit --policy/--namespace`
//! take them.

/// Whether `text` matches `glob` as a whole: `*` stands for any text (`/` included), `?` for
/// one character, everything else for itself.
pub(crate) fn matches(glob: &str, text: &str) -> bool {
    let glob: Vec<char> = glob.chars().collect();
    let text: Vec<char> = text.chars().collect();
    // The classic two-pointer match with one backtrack point: linear in practice, never
    // exponential.
    let (mut g, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match glob.get(g) {
            Some('*') => {
                star = Some((g, t));
                g += 1;
            }
            Some(&c) if c == '?' || c == text[t] => {
                g += 1;
                t += 1;
            }
            _ => match star {
                Some((star_g, star_t)) => {
                    g = star_g + 1;
                    t = star_t + 1;
                    star = Some((star_g, star_t + 1));
                }
                None => return false,
            },
        }
    }
    glob[g..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn globs_match_whole_texts() {
        assert!(matches("pod-security-*", "pod-security-baseline"));
        assert!(matches("*", ""));
        assert!(matches("CREATE Pod/*/web-?", "CREATE Pod/shop/web-0"));
        assert!(matches("*web*", "CREATE Pod/shop/web-0"));
        assert!(matches("a*b*c", "aXbYbZc"));
        assert!(!matches("pod-security", "pod-security-baseline"));
        assert!(!matches("web-?", "web-10"));
        assert!(!matches("a*b", "aXbYc"));
        assert!(!matches("", "x"));
        assert!(matches("é*", "été"));
    }
}
