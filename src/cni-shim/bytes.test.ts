import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { latin1Bytes, utf8Bytes } from './bytes.js';

describe('bytes', () => {
  it('give what Buffer.from gives, for ASCII, latin1 and multi-byte characters', () => {
    for (const s of ['', 'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', '/run/coild.sock', 'héllo ÿ', '日本語 🙂', '\u0000\u0080']) {
      assert.deepEqual(utf8Bytes(s), Buffer.from(s, 'utf8'), JSON.stringify(s));
      assert.deepEqual(latin1Bytes(s), Buffer.from(s, 'latin1'), JSON.stringify(s));
    }
  });
});
