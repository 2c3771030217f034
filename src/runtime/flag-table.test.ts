import assert from 'node:assert/strict';
import { readdir, readFile } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { defineFlags, HelpRequested } from './flag-table.js';
import { ConfigError } from './flags.js';

const table = defineFlags('demo', {
  verbose: { kind: 'bool', default: false, help: 'say more' },
  tri: { kind: 'bool', help: 'unset, on or off' },
  name: { kind: 'string', default: 'x', help: 'a name' },
  count: { kind: 'int', default: 8, max: 10, help: 'how many' },
  port: { kind: 'port', default: 5555, help: 'a port' },
  every: { kind: 'duration', default: '5m', help: 'how often' },
  listen: { kind: 'addr', default: ':9384', help: 'where' },
  mode: { kind: 'enum', values: ['a', 'b', 'c'], default: 'a', help: 'which' },
  yes: { kind: 'bool', short: 'y', default: false, help: 'no questions' },
  opt: { kind: 'string', help: 'no default' },
});

describe('flag table (Go flag semantics)', () => {
  it('a repeatable string flag keeps every occurrence in order, [] when absent, and shows so in the usage', () => {
    const t = defineFlags('rep', { from: { kind: 'strings', help: 'a report' }, n: { kind: 'int', default: 1, help: 'n' } });
    assert.deepEqual(t.parse([]).from, []);
    assert.deepEqual(t.parse(['--from', 'a.json', '--n=2', '--from=b.json', '-from', 'c']).from, ['a.json', 'b.json', 'c']);
    assert.throws(() => t.parse(['--from']), /--from: flag needs an argument/);
    assert.match(t.usage(), /--from stringArray\s+a report\n/);
  });

  it('defaults go through the same parsers as given values', () => {
    assert.deepEqual(table.parse([]), {
      verbose: false, tri: undefined, name: 'x', count: 8, port: 5555, every: 300_000, listen: { host: '0.0.0.0', port: 9384 }, mode: 'a', yes: false, opt: undefined,
    });
  });

  it('takes -flag and --flag, --flag=value and --flag value, the last one winning', () => {
    const v = table.parse(['-name=n1', '--count', '3', '-every', '1h30m', '--listen=127.0.0.1:80', '--mode=c', '--count=4', '-port', '6000']);
    assert.deepEqual([v.name, v.count, v.every, v.listen, v.mode, v.port], ['n1', 4, 5_400_000, { host: '127.0.0.1', port: 80 }, 'c', 6000]);
    assert.equal(table.parse(['--opt', '--verbose']).opt, '--verbose', 'a non-boolean takes the next argument, whatever it is (Go)');
    assert.equal(table.parse(['--opt=']).opt, '');
    assert.equal(table.parse(['--listen=0']).listen, undefined, '0 disables an address');
  });

  it("booleans: --flag, --flag=true|false and Go's other ParseBool spellings, never a separate value", () => {
    assert.equal(table.parse(['--verbose']).verbose, true);
    assert.equal(table.parse(['-verbose']).verbose, true);
    assert.equal(table.parse(['--verbose=true']).verbose, true);
    assert.equal(table.parse(['--verbose=false']).verbose, false);
    assert.deepEqual(['1', 't', 'T', 'TRUE', 'True', '0', 'f', 'F', 'FALSE', 'False'].map((b) => table.parse([`--verbose=${b}`]).verbose), [true, true, true, true, true, false, false, false, false, false]);
    assert.deepEqual([table.parse([]).tri, table.parse(['--tri']).tri, table.parse(['--tri=false']).tri], [undefined, true, false]);
    assert.throws(() => table.parse(['--verbose', 'false']), /unexpected argument "false"/);
    assert.throws(() => table.parse(['--verbose=maybe']), /^ConfigError: --verbose: expected true or false, got "maybe"$/);
    assert.throws(() => table.parse(['--verbose=']), /--verbose: expected true or false, got ""/);
  });

  it('a short alias is -x only', () => {
    assert.equal(table.parse(['-y']).yes, true);
    assert.equal(table.parse(['-yes']).yes, true);
    assert.throws(() => table.parse(['--y']), /Unknown option '--y'/);
  });

  it('every error is a ConfigError naming the flag', () => {
    const cases: [string[], RegExp][] = [
      [['--nope'], /^Unknown option '--nope'$/],
      [['-nope=1'], /^Unknown option '-nope'$/],
      [['--name'], /^--name: flag needs an argument$/],
      [['--count=11'], /^--count: "11" is not an integer in \[0, 10\]$/],
      [['--count=-1'], /^--count: "-1" is not an integer/],
      [['--count=1.5'], /^--count: "1.5" is not an integer/],
      [['--port=0'], /^--port: invalid port "0"$/],
      [['--port=70000'], /^--port: invalid port "70000"$/],
      [['--every=soon'], /^--every: invalid duration "soon"/],
      [['--listen=:99999'], /^--listen: invalid address ":99999"$/],
      [['--mode=d'], /^--mode: expected "a", "b" or "c", got "d"$/],
      [['stray'], /^unexpected argument "stray"$/],
      [['--', 'stray'], /^unexpected argument "stray"$/],
    ];
    for (const [argv, message] of cases) {
      assert.throws(() => table.parse(argv), (e: unknown) => e instanceof ConfigError && message.test(e.message), argv.join(' '));
    }
    assert.equal(table.parse(['--']).name, 'x', '-- ends the flags');
  });

  it('-h, -help and --help raise HelpRequested with the usage made from the table', () => {
    for (const h of ['-h', '-help', '--help']) {
      assert.throws(() => table.parse(['--verbose', h]), (e: unknown) => e instanceof HelpRequested && !(e instanceof ConfigError) && e.usage === table.usage());
    }
    const usage = table.usage();
    assert.match(usage, /^Usage of demo:\n/);
    assert.match(usage, /\n {6}--verbose {2,}say more\n/, 'a boolean shows no type and no false default');
    assert.match(usage, /\n {6}--name string {2,}a name \(default "x"\)\n/);
    assert.match(usage, /\n {6}--count int {2,}how many \(default 8\)\n/);
    assert.match(usage, /\n {6}--every duration {2,}how often \(default 5m\)\n/);
    assert.match(usage, /\n {6}--mode a\|b\|c {2,}which \(default a\)\n/);
    assert.match(usage, /\n {2}-y, --yes {2,}no questions\n/);
    assert.match(usage, /\n {6}--opt string {2,}no default\n$/);
    const lines = usage.split('\n');
    assert.equal(lines.length - 2, Object.keys(table.specs).length, 'one line per flag');
    const column = (flag: string, help: string): number => lines.find((l) => l.includes(flag))!.indexOf(help);
    assert.equal(column('--verbose', 'say more'), column('--every', 'how often'), 'helps aligned');
  });
});

describe('a strings flag (pflag StringArray)', () => {
  const multi = defineFlags('multi', { x: { kind: 'strings', short: 'x', help: 'another one' }, d: { kind: 'strings', default: ['a'], help: 'with default' } });
  it('collects every occurrence in order; absent, its default or none', () => {
    assert.deepEqual(multi.parse(['-x', 'one', '--x=two', '-x', '']), { x: ['one', 'two', ''], d: ['a'] });
    assert.deepEqual(multi.parse(['--d', 'b']), { x: [], d: ['b'] });
    assert.throws(() => multi.parse(['-x']), (e: unknown) => e instanceof ConfigError && /^--x: flag needs an argument/.test(e.message));
    assert.match(multi.usage(), /\n {2}-x, --x stringArray {2,}another one\n/);
    assert.match(multi.usage(), /--d stringArray {2,}with default \(default \[a\]\)\n/);
  });
});

const root = fileURLToPath(new URL('../../../', import.meta.url));

async function sources(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const entry of await readdir(join(root, dir), { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...(await sources(path)));
    else if (entry.name.endsWith('.ts')) out.push(path);
  }
  return out;
}

it("no program parses flags with node:util's parseArgs: every command line goes through the flag table", async () => {
  const offenders: string[] = [];
  for (const file of await sources('src')) {
    const text = await readFile(join(root, file), 'utf8');
    if (/import\s*\{[^}]*\bparseArgs\b[^}]*\}\s*from\s*['"](node:)?util['"]/.test(text) || /\butil\.parseArgs\b/.test(text)) offenders.push(relative(root, join(root, file)));
  }
  assert.deepEqual(offenders, []);
});

it('every hack/bench script reads its command line through a flag table, never parseArgs or process.argv', async () => {
  const offenders: string[] = [];
  for (const file of await sources('hack/bench')) {
    const text = await readFile(join(root, file), 'utf8');
    if (/\bparseArgs\b/.test(text) || (/process\.argv(\[[2-9]|\.slice\()/.test(text) && !file.endsWith('bench-flags.ts'))) offenders.push(file);
  }
  assert.deepEqual(offenders, []);
});
