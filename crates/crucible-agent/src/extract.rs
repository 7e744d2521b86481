//! The code in a response: inside `<answer>...</answer>` markers when present, else the last
//! fenced python block (a bare fence when no block is tagged python). Reasoning inside
//! `<think>...</think>` is never searched: drafts there are not the answer.

/// Why a response has no code to judge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoCode(pub String);

impl std::fmt::Display for NoCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A fenced block: its info string and body, and whether it was closed.
struct Block<'a> {
    lang: &'a str,
    body: String,
    closed: bool,
}

fn blocks(text: &str) -> Vec<Block<'_>> {
    let mut out = Vec::new();
    let mut open: Option<(&str, Vec<&str>)> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        match open.take() {
            None => {
                if let Some(info) = trimmed.strip_prefix("```") {
                    open = Some((info.trim(), Vec::new()));
                }
            }
            Some((lang, mut body)) => {
                if trimmed.trim_end() == "```" {
                    out.push(Block {
                        lang,
                        body: body.join("\n"),
                        closed: true,
                    });
                } else {
                    body.push(line);
                    open = Some((lang, body));
                }
            }
        }
    }
    if let Some((lang, body)) = open {
        out.push(Block {
            lang,
            body: body.join("\n"),
            closed: false,
        });
    }
    out
}

/// The response with `<think>` sections removed (an unclosed one runs to the end). A closing
/// tag with no opening one means the chat template opened the reasoning: all before it goes.
fn without_thinking(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("<think>") {
        out.push_str(&rest[..start]);
        match rest[start..].find("</think>") {
            Some(end) => rest = &rest[start + end + "</think>".len()..],
            None => return out,
        }
    }
    out.push_str(rest);
    match out.rfind("</think>") {
        Some(end) => out[end + "</think>".len()..].to_string(),
        None => out,
    }
}

fn is_python(lang: &str) -> bool {
    let lang = lang
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_ascii_lowercase();
    matches!(lang.as_str(), "python" | "py" | "python3")
}

/// The code to judge, or why there is none.
pub fn extract_code(response: &str) -> Result<String, NoCode> {
    let text = without_thinking(response);
    if let Some(start) = text.rfind("<answer>") {
        let inner = &text[start + "<answer>".len()..];
        let Some(end) = inner.find("</answer>") else {
            return Err(NoCode(
                "the <answer> section is not closed (was the response cut off?)".into(),
            ));
        };
        let inner = &inner[..end];
        let code = match blocks(inner).into_iter().rev().find(|b| b.closed) {
            Some(b) => b.body,
            None => inner.to_string(),
        };
        return non_empty(code, "the <answer> section is empty");
    }
    let all = blocks(&text);
    if let Some(last) = all.last()
        && !last.closed
        && (is_python(last.lang) || last.lang.is_empty())
    {
        return Err(NoCode(
            "the last code block is not closed (was the response cut off?)".into(),
        ));
    }
    let closed: Vec<&Block> = all.iter().filter(|b| b.closed).collect();
    let chosen = closed
        .iter()
        .rev()
        .find(|b| is_python(b.lang))
        .or_else(|| closed.iter().rev().find(|b| b.lang.is_empty()));
    match chosen {
        Some(b) => non_empty(b.body.clone(), "the python code block is empty"),
        None if closed.is_empty() => Err(NoCode(
            "the response has no fenced ```python code block and no <answer> section".into(),
        )),
        None => Err(NoCode(format!(
            "the response has code blocks, but none in python (found: {})",
            closed
                .iter()
                .map(|b| if b.lang.is_empty() {
                    "untagged"
                } else {
                    b.lang
                })
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

fn non_empty(code: String, why: &str) -> Result<String, NoCode> {
    if code.trim().is_empty() {
        Err(NoCode(why.into()))
    } else {
        Ok(format!(
            "{}\n",
            code.trim_end().trim_start_matches(['\n', '\r'])
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_python_block_wins() {
        let r = "draft:\n```python\nA = 1\n```\nfinal:\n```python\nB = 2\n```\ntext ```inline```";
        assert_eq!(extract_code(r).unwrap(), "B = 2\n");
    }

    #[test]
    fn python_tagged_beats_later_untagged_and_bare_is_a_fallback() {
        let r = "```python\nA = 1\n```\n```\nshell\n```";
        assert_eq!(extract_code(r).unwrap(), "A = 1\n");
        assert_eq!(extract_code("```\nC = 3\n```").unwrap(), "C = 3\n");
    }

    #[test]
    fn answer_markers_and_thinking() {
        let r = "<think>```python\nDRAFT\n```</think>\n<answer>\n```python\nX = 1\n```\n</answer>";
        assert_eq!(extract_code(r).unwrap(), "X = 1\n");
        let r = "<answer>\nY = 2\n</answer>";
        assert_eq!(extract_code(r).unwrap(), "Y = 2\n");
        // A draft only inside the reasoning is not an answer.
        let r = "<think>```python\nDRAFT\n```</think> I give up.";
        assert!(extract_code(r).is_err());
        let r = "reasoning ```python\nDRAFT\n``` </think> ```python\nZ = 1\n```";
        assert_eq!(extract_code(r).unwrap(), "Z = 1\n");
    }

    #[test]
    fn reasons_are_clear() {
        let e = extract_code("I cannot help.").unwrap_err();
        assert!(e.0.contains("no fenced"), "{e}");
        let e = extract_code("```python\nclass ModelNew:\n").unwrap_err();
        assert!(e.0.contains("not closed"), "{e}");
        let e = extract_code("```python\n\n```").unwrap_err();
        assert!(e.0.contains("empty"), "{e}");
        let e = extract_code("```bash\nls\n```").unwrap_err();
        assert!(e.0.contains("none in python (found: bash)"), "{e}");
        let e = extract_code("<answer>```python\nX\n```").unwrap_err();
        assert!(e.0.contains("<answer> section is not closed"), "{e}");
    }
}
