/**
 * How `kubectl coil` names an error nothing expected (main.ts): one line, the error's kind when
 * it is not a plain Error (`TypeError: …`), its message, and the messages of its causes — never a
 * stack or source text. A runtime printing an uncaught error shows the source line that threw;
 * in a bundle that is one minified line of about 100 kB (issue 33 saw it on a terminal).
 */

/** At most this many characters of a message: a line, not a page. */
export const MAX_FATAL_CHARS = 500;

/** `err` (anything thrown) as one line of at most {@link MAX_FATAL_CHARS} characters. */
export function fatalMessage(err: unknown): string {
  const parts: string[] = [];
  let e: unknown = err;
  for (let depth = 0; depth < 4 && e !== undefined && e !== null; depth++) {
    if (e instanceof Error) {
      const kind = e.name && e.name !== 'Error' ? `${e.name}: ` : '';
      parts.push(`${kind}${e.message || '(no message)'}`);
      e = e.cause;
    } else {
      parts.push(typeof e === 'string' ? e : safeString(e));
      break;
    }
  }
  const line = parts.filter((p, i) => i === 0 || !parts[i - 1]!.includes(p)).join(': ').replace(/\s+/g, ' ').trim() || 'an unknown error';
  return line.length > MAX_FATAL_CHARS ? `${line.slice(0, MAX_FATAL_CHARS - 1)}…` : line;
}

function safeString(v: unknown): string {
  try {
    return JSON.stringify(v) ?? String(v);
  } catch {
    return Object.prototype.toString.call(v);
  }
}
