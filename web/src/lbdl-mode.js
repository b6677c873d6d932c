// lbdl's tokens for CodeMirror's highlighting, read from grammar/lbdl.lark: keywords that open
// a statement, the box's op (its first word), `name=` hyper-parameters, numbers, `×N`, arrows
// naming tensors, strings and comments. A stream tokenizer: it colours, it does not parse.
import { StreamLanguage } from "@codemirror/language";

const KEYWORDS = new Set([
  "import", "block", "model", "on", "input", "output", "from", "residual", "shortcut",
  "experts", "assert",
]);
const ATOMS = new Set(["true", "false", "int", "params", "macs"]);
const NAME = /^[^\W\d][\w\u0300-\u036f]*(?:-[\w\u0300-\u036f]+)*/u;

export const lbdl = StreamLanguage.define({
  name: "lbdl",
  startState: () => ({ first: true, arrow: false, keyword: "", named: false }),
  token(stream, state) {
    if (stream.sol()) {
      state.first = true;
      state.arrow = false;
      state.keyword = "";
      state.named = false;
    }
    if (stream.eatSpace()) return null;
    if (stream.match("#")) {
      stream.skipToEnd();
      return "comment";
    }
    if (stream.match(/^"[^"\n]*"?/)) return "string";
    if (stream.match("->") || stream.match("→")) {
      state.arrow = true;
      return "operator";
    }
    if (stream.match(/^(?:×|x(?=[ \t]*[0-9A-Z(]))/)) return "operator";
    if (stream.match(/^\d+(?:_\d+)*(?:\.\d*)?(?:[eE][-+]?\d+)?/)) return "number";
    if (stream.match(/^(?:<=|>=|==|[-+*\/^<>=·÷−⌊⌋⌈⌉():,])/)) return "punctuation";
    const word = stream.match(NAME);
    if (word) {
      const text = word[0];
      const wasFirst = state.first;
      state.first = false;
      if (state.arrow) {
        state.arrow = false;
        return "variableName.definition";
      }
      if (wasFirst && KEYWORDS.has(text)) {
        state.keyword = text;
        return "keyword";
      }
      // `scan h: H:` opens a group; `scan b=...` is the box of that name
      if (wasFirst && text === "scan" && stream.match(/^[ \t]+[^\W\d]\w*[ \t]*:/u, false)) {
        state.keyword = text;
        return "keyword";
      }
      if ((state.keyword === "model" || state.keyword === "block") && !state.named) {
        state.named = true;
        return "variableName.definition";
      }
      if (stream.peek() === "=" && !stream.match("==", false)) return "propertyName";
      if (ATOMS.has(text)) return "atom";
      if (wasFirst) return "typeName";
      if (/^[A-Z]/.test(text)) return "variableName.special";
      return "variableName";
    }
    stream.next();
    state.first = false;
    return null;
  },
  languageData: { commentTokens: { line: "#" } },
});
