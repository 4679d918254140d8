// make_ws_fixtures.js - writes tests/fixtures/tokenizer/ws_runs.json: the ids Hugging Face
// tokenizers gives for long runs of white space (1 MiB and 10 MiB), for test_tokenizer.
//
// The Python fixtures (make_tokenizer_fixtures.py) hold texts of a few hundred bytes; these
// texts are megabytes, so each is stored as a spec (prefix + unit * repeat + suffix) and its
// ids compressed as [[ids of a period], repeats] pairs. The ids come from the `tokenizers` npm
// package (the same Rust library as the Python one, release 0.23.2):
//
//     npm install tokenizers@0.23.2
//     xz -dc tests/fixtures/tokenizer/big.json.xz > /tmp/big.json
//     node tools/reference/make_ws_fixtures.js tests/fixtures/tokenizer/small.json /tmp/big.json \
//         models/nemotron-h-kjv/tokenizer.json > tests/fixtures/tokenizer/ws_runs.json
//
// A run of 10 MiB spaces is left out: tokenizers 0.23.2 aborts on it (a panic: Oniguruma's
// retry limit, hit by the pattern's \s*[\r\n]+ backtracking over the run). test_tokenizer checks
// that run against the rule the 1 MiB one shows (one piece, BPE'd into tokens of 32 spaces with
// small and big, of one space with the demo model's tokenizer, which merges no spaces).
'use strict';
const {Tokenizer} = require('tokenizers');

const MiB = 1 << 20;
const cases = [
    {name: 'spaces_1m', prefix: '', unit: ' ', repeat: MiB, suffix: ''},
    {name: 'spaces_1m_word', prefix: '', unit: ' ', repeat: MiB, suffix: 'word'},
    {name: 'a_spaces_b', prefix: 'a', unit: ' ', repeat: MiB, suffix: 'b'},
    {name: 'newlines_1m', prefix: '', unit: '\n', repeat: MiB, suffix: ''},
    {name: 'tabs_1m', prefix: '', unit: '\t', repeat: MiB, suffix: ''},
    {name: 'crlf_1m', prefix: '', unit: '\r\n', repeat: MiB / 2, suffix: ''},
    {name: 'nbsp_1m', prefix: '', unit: '\u00a0', repeat: MiB / 2, suffix: ''},
    {name: 'space_ideographic_1m', prefix: '', unit: ' \u3000', repeat: MiB / 4, suffix: '\n'},
    {name: 'newlines_10m', prefix: '', unit: '\n', repeat: 10 * MiB, suffix: ''},
    {name: 'space_newline_10m', prefix: '', unit: ' \n', repeat: 5 * MiB, suffix: ''},
];

// ids as [[period], repeats] pairs: at each point the period of 1..4 ids that covers most
function compress(ids) {
    const out = [];
    let i = 0;
    while (i < ids.length) {
        let best = 1, bestReps = 1;
        for (let p = 1; p <= 4 && i + p <= ids.length; p++) {
            let r = 1;
            while (i + (r + 1) * p <= ids.length) {
                let same = true;
                for (let k = 0; k < p && same; k++) same = ids[i + r * p + k] === ids[i + k];
                if (!same) break;
                r++;
            }
            if (p * r > best * bestReps) { best = p; bestReps = r; }
        }
        out.push([ids.slice(i, i + best), bestReps]);
        i += best * bestReps;
    }
    return out;
}

async function main() {
    const [smallPath, bigPath, demoPath] = process.argv.slice(2);
    const toks = {small: Tokenizer.fromFile(smallPath), big: Tokenizer.fromFile(bigPath),
                  demo: Tokenizer.fromFile(demoPath)};
    const result = [];
    for (const c of cases) {
        const text = c.prefix + c.unit.repeat(c.repeat) + c.suffix;
        const entry = Object.assign({}, c, {ids: {}});
        for (const [k, tok] of Object.entries(toks)) {
            const enc = await tok.encode(text, null, {addSpecialTokens: false});
            entry.ids[k] = compress(enc.getIds());
        }
        result.push(entry);
        process.stderr.write(`${c.name}: ${entry.ids.small.length} / ${entry.ids.big.length} / ${entry.ids.demo.length} pairs\n`);
    }
    process.stdout.write(JSON.stringify(result, null, 1) + '\n');
}
main();
