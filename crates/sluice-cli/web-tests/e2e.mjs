// End-to-end test of `sluice serve --web` in Debian's chromium, driven by playwright-core (no
// browser download). Run by crates/sluice-cli/tests/web_browser.rs, which passes:
//   SLUICE_BIN  the sluice binary      SLUICE_WEB_OUT  a directory for screenshots and files
//   SLUICE_SEED the seed of the files' bytes (printed)
// It starts a real server on 127.0.0.1, logs in, browses, makes a folder, uploads a file and a
// folder of 200 files, downloads a file and a folder, compares hashes, cancels and resumes an
// upload (bytes counted at the server), answers the overwrite question, sees a wrong token and a
// path outside the root refused, and checks a hostile file name shows as text. A second server
// ("other") shows in a pane: copies between the two run as jobs of the destination server, one
// of them finishing after the tab was closed.

import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { chromium } from "playwright-core";

const bin = process.env.SLUICE_BIN;
const out = process.env.SLUICE_WEB_OUT;
const seed = Number(process.env.SLUICE_SEED ?? 29);
if (!bin || !out) throw new Error("set SLUICE_BIN and SLUICE_WEB_OUT");
console.log(`e2e: seed ${seed}, output in ${out}`);
const TOKEN = "e2e-token-0123456789abcdef";
const XSS = "<img src=x onerror=alert(1)>";

// Files: bytes from a seeded generator (xorshift32), so a failure can be reproduced.
let state = seed >>> 0 || 1;
function bytes(n) {
  const b = Buffer.alloc(n);
  for (let i = 0; i < n; i += 1) {
    state ^= state << 13;
    state >>>= 0;
    state ^= state >>> 17;
    state ^= state << 5;
    state >>>= 0;
    b[i] = state & 0xff;
  }
  return b;
}
const sha = (buf) => createHash("sha256").update(buf).digest("hex");
const shaFile = (p) => sha(fs.readFileSync(p));

fs.rmSync(out, { recursive: true, force: true });
const root = path.join(out, "root");
const local = path.join(out, "local");
for (const d of [root, local, path.join(out, "state"), path.join(root, "served"), path.join(local, "tree200")]) {
  fs.mkdirSync(d, { recursive: true });
}
fs.writeFileSync(path.join(out, "tokens"), `${TOKEN}\n`, { mode: 0o600 });
fs.writeFileSync(path.join(root, XSS), "hostile name\n");
for (let i = 0; i < 20; i += 1) fs.writeFileSync(path.join(root, "served", `s${i}.bin`), bytes(1000 + i * 97));
fs.mkdirSync(path.join(root, "served", "sub"));
fs.writeFileSync(path.join(root, "served", "sub", "deep.txt"), bytes(5000));
// tree200's files by their paths in it: file i in folder d(i mod 10).
const TREE_RELS = [...Array(200).keys()].map((i) => `d${i % 10}/f${i}.bin`);
TREE_RELS.forEach((rel, i) => {
  fs.mkdirSync(path.dirname(path.join(local, "tree200", rel)), { recursive: true });
  fs.writeFileSync(path.join(local, "tree200", rel), bytes(200 + (i % 37) * 31));
});
// paced20: a folder whose run, paced at 1 MB/s, takes seconds (tree200's 150 KB would end in
// a blink, before a click on one of its rows).
const PACED_RELS = [...Array(20).keys()].map((i) => `p${i % 4}/g${i}.bin`);
PACED_RELS.forEach((rel, i) => {
  fs.mkdirSync(path.dirname(path.join(local, "paced20", rel)), { recursive: true });
  fs.writeFileSync(path.join(local, "paced20", rel), bytes((256 << 10) + i * 13));
});
fs.writeFileSync(path.join(local, "one.bin"), bytes(1 << 20));
// Uploaded beside the server's file of the same hostile name.
fs.writeFileSync(path.join(local, XSS), bytes(3000));
fs.writeFileSync(path.join(local, "resume.bin"), bytes(6 << 20));
fs.writeFileSync(path.join(root, "down.bin"), bytes(6 << 20));
fs.writeFileSync(path.join(root, "bad.bin"), bytes(300000));
// For WebTransport: several 4 MiB blocks each, and a last one short.
const WT_SIZE = (24 << 20) + 4321;
fs.writeFileSync(path.join(local, "wt-up.bin"), bytes(WT_SIZE));
fs.writeFileSync(path.join(root, "wt-down.bin"), bytes(WT_SIZE));
// Begun over HTTPS, gone on over WebTransport.
const SWITCH_SIZE = (16 << 20) + 777;
fs.writeFileSync(path.join(local, "switch.bin"), bytes(SWITCH_SIZE));
// For the page's choice of transport: at 8 MB/s a probe of 3 s cannot move it all.
const AUTO_SIZE = 48 << 20;
fs.writeFileSync(path.join(local, "auto.bin"), bytes(AUTO_SIZE));
fs.writeFileSync(path.join(root, "auto-get.bin"), bytes(AUTO_SIZE));

// The other server, for copies between servers. Its token reads at 32 Mbit/s, so that a copy
// from it takes long enough for the tab to close while it runs.
const otherRoot = path.join(out, "other-root");
fs.mkdirSync(path.join(otherRoot, "far"), { recursive: true });
fs.mkdirSync(path.join(out, "other-state"), { recursive: true });
const OTHER_TOKEN = "e2e-other-token-fedcba9876543210";
fs.writeFileSync(path.join(out, "other-tokens"), `${OTHER_TOKEN} rate=32Mbit\n`, { mode: 0o600 });
for (let i = 0; i < 5; i += 1) fs.writeFileSync(path.join(otherRoot, "far", `f${i}.bin`), bytes(3000 + i * 1001));
const SLOW_SIZE = 16 << 20;
fs.writeFileSync(path.join(otherRoot, "slow.bin"), bytes(SLOW_SIZE));
const other = spawn(bin, [
  "serve", "--root", otherRoot, "--tokens", path.join(out, "other-tokens"),
  "--state-dir", path.join(out, "other-state"), "--listen", "127.0.0.1:0",
], { stdio: ["ignore", "pipe", "inherit"] });
process.on("exit", () => other.kill("SIGTERM"));
const serving = (child) => new Promise((resolve, reject) => {
  let text = "";
  child.stdout.on("data", (d) => {
    text += d;
    const m = text.match(/serving on (\S+) with fingerprint (\S+)/);
    if (m) resolve({ address: m[1], fingerprint: m[2] });
  });
  child.on("exit", (code) => reject(new Error(`a server exited (${code}): ${text}`)));
});
const otherAt = await serving(other);

// The server.
const server = spawn(bin, [
  "serve", "--root", root, "--tokens", path.join(out, "tokens"), "--state-dir", path.join(out, "state"),
  "--listen", "127.0.0.1:0", "--web", "127.0.0.1:0", "--metrics", "127.0.0.1:0",
  // One WebTransport session: the cancel-and-resume steps below count on four blocks in flight
  // (several sessions, four each, would have every block of the 24 MiB file under way at once).
  // Blocks spread over sessions are tested in src/web/wt/tests.rs.
  "--web-transport-lanes", "1",
], { stdio: ["ignore", "pipe", "inherit"] });
let metricsUrl = "";
const serverAt = serving(server);
const base = await new Promise((resolve, reject) => {
  let text = "";
  server.stdout.on("data", (d) => {
    text += d;
    const metrics = text.match(/metrics on (http:\/\/[^ ]+\/metrics)/);
    const m = text.match(/web app on (https:\/\/[^ ]+\/) with fingerprint/);
    if (m && metrics) {
      metricsUrl = metrics[1];
      resolve(m[1]);
    }
  });
  server.on("exit", (code) => reject(new Error(`the server exited (${code}): ${text}`)));
});
console.log(`e2e: server at ${base}`);
// However this script ends, the server goes with it.
process.on("exit", () => server.kill("SIGTERM"));

// One series of the server's metrics, now.
const series = async (name) => {
  const scrape = await (await fetch(metricsUrl)).text();
  return Number(scrape.split("\n").find((l) => l.startsWith(`${name} `))?.split(" ")[1] ?? -1);
};
const WT_SENT = 'sluice_webtransport_bytes_total{direction="sent"}';
const WT_RECEIVED = 'sluice_webtransport_bytes_total{direction="received"}';
// The size of the server's partial upload of `name` in the root (0 when there is none): an
// HTTPS upload's (`.sluice-web-`), or the transfer machines' (`.sluice-part-`, as the CLI's).
const partialSize = (name, kind = "web") => {
  const part = fs.readdirSync(root).find((n) => n.startsWith(`.${name}.sluice-${kind}-`));
  return part ? fs.statSync(path.join(root, part)).size : 0;
};
// Waits until `read()` gives the same value 5 times 100 ms apart; that value.
const settled = async (read) => {
  let held = await read();
  for (let same = 0; same < 5; ) {
    await new Promise((r) => setTimeout(r, 100));
    const now = await read();
    same = now === held ? same + 1 : 0;
    held = now;
  }
  return held;
};

const failures = [];
let step = "start";
function check(ok, what) {
  if (!ok) throw new Error(`${step}: ${what}`);
}
let context;
/** @type {import("playwright-core").Page | undefined} */
let failedPage;
try {
  // A fresh profile (--user-data-dir), and no calls home.
  context = await chromium.launchPersistentContext(path.join(out, "profile"), {
    executablePath: process.env.SLUICE_CHROMIUM ?? "/usr/bin/chromium",
    headless: true,
    args: ["--no-sandbox", "--disable-background-networking", "--disable-component-update", "--no-first-run"],
    ignoreHTTPSErrors: true,
    acceptDownloads: true,
    viewport: { width: 1280, height: 860 },
  });
  const page = context.pages()[0] ?? (await context.newPage());
  failedPage = page;
  page.on("dialog", (d) => {
    failures.push(`a ${d.type()} dialog opened: ${d.message()}`);
    d.dismiss();
  });
  page.on("pageerror", (e) => failures.push(`page error: ${e.message}`));
  page.on("console", (m) => {
    if (["error", "warning"].includes(m.type()) && !m.text().startsWith("Failed to load resource")) console.log(`e2e: page console: ${m.text()}`);
  });
  const shot = (name) => page.screenshot({ path: path.join(out, `${name}.png`) });
  const server0 = page.locator("#pane-1");
  const local0 = page.locator("#pane-0");
  const row = (pane, name) => pane.locator("tr").filter({ has: page.locator("td.name", { hasText: name }) }).first();
  // Waits until `n` transfers are listed and each is done or skipped, and checks that each
  // done row shows its file's whole size as done. The wait only guards against a hang (no
  // speed is asserted): 200 uploads took over 30 s while another build loaded this 2-core
  // machine.
  const jobsDone = async (n = 1) => {
    await page.waitForFunction((n) => {
      const rows = [...document.querySelectorAll("#queue tr")];
      const failed = rows.find((r) => r.dataset.state === "failed");
      if (failed) throw new Error(`a transfer failed: ${failed.textContent}`);
      return rows.length === n && rows.every((r) => ["done", "skipped"].includes(r.dataset.state ?? ""));
    }, n, { timeout: 120000, polling: 100 });
    const short = await page.$$eval('#queue tr[data-state="done"]', (rows) => rows
      .filter((r) => r.dataset.done !== r.dataset.size)
      .map((r) => `${r.querySelector("td.file")?.textContent}: ${r.dataset.done} of ${r.dataset.size} bytes`));
    check(short.length === 0, `a finished row shows less or more than its file: ${short.join(", ")}`);
  };
  const clearDone = () => page.click("#clear-done");
  // The SHA-256 of every file below the browser storage's folder `top`, by its path there.
  const opfsHashes = (top) => page.evaluate(async (top) => {
    const result = {};
    const walk = async (dir, prefix) => {
      for await (const h of dir.values()) {
        const p = prefix ? `${prefix}/${h.name}` : h.name;
        if (h.kind === "directory") await walk(h, p);
        else {
          const digest = await crypto.subtle.digest("SHA-256", await (await h.getFile()).arrayBuffer());
          result[p] = [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
        }
      }
    };
    await walk(await (await navigator.storage.getDirectory()).getDirectoryHandle(top), "");
    return result;
  }, top);

  step = "login";
  await page.goto(base);
  await page.waitForSelector("#login-form", { state: "visible" });
  await shot("login");
  await page.fill("#token", "not-the-token");
  await page.click("#login-form button[type=submit]");
  await page.waitForFunction(() => document.querySelector("#login-error")?.textContent?.includes("not accepted"));
  await page.fill("#token", TOKEN);
  await page.click("#login-form button[type=submit]");
  await page.waitForSelector("#app-view:not([hidden])");
  // The page connects over WebTransport (the server's self-signed certificate pinned by its
  // hash) and says so.
  await page.waitForSelector("#transport[data-transport]");
  const viaWt = await page.textContent("#transport");
  check(viaWt.includes("WebTransport"), `the page says transfers go over WebTransport: ${viaWt}`);
  // The HTTPS operations first (WebTransport switched off; its own steps come later).
  await page.selectOption("#transport-mode", "https");
  await page.waitForFunction(() => document.querySelector("#transport")?.textContent?.includes("switched off"));
  const transport = await page.textContent("#transport");
  check(transport.includes("HTTPS"), "the page says transfers go over HTTPS");

  step = "browse";
  await row(server0, XSS).waitFor();
  const shown = await row(server0, XSS).locator("td.name").textContent();
  check(shown === XSS, `the hostile name shows as text: ${shown}`);
  check(await page.locator("#panes img").count() === 0, "no img element in the panes");
  await row(server0, "served").dblclick();
  await row(server0, "s3.bin").waitFor();
  await page.keyboard.press("Backspace");
  await row(server0, "served").waitFor();

  step = "outside the root";
  await server0.locator("input.path").fill("../");
  await server0.locator("input.path").press("Enter");
  await page.waitForFunction(() => document.querySelector("#pane-1 .status.error")?.textContent?.includes("refused"));
  await server0.locator("input.path").fill("");
  await server0.locator("input.path").press("Enter");
  await row(server0, "served").waitFor();

  step = "make folder";
  await server0.locator(".list").click();
  await page.keyboard.press("F7");
  await page.fill("#ask-input", "made");
  await page.keyboard.press("Enter");
  await row(server0, "made").waitFor();
  check(fs.statSync(path.join(root, "made")).isDirectory(), "the folder is on disk");

  step = "upload a file";
  await local0.locator("input.pick-files").setInputFiles(path.join(local, "one.bin"));
  await row(local0, "one.bin").click();
  // The page hashes the file (BLAKE3, Rust in WebAssembly); a file this small (1 MiB) waits
  // for its hash and sends it with its bytes, in one request, and the server's own must match.
  // (A larger one sends `later` and the hash in a request of no bytes: the cancelled and
  // resumed upload below.)
  /** @type {string[]} */
  const said = [];
  const saying = (/** @type {import("playwright-core").Request} */ r) => {
    if (r.method() === "PUT" && r.url().includes("one.bin")) said.push(r.headers()["x-sluice-blake3"] ?? "");
  };
  page.on("request", saying);
  const [put] = await Promise.all([
    page.waitForResponse((r) => r.request().method() === "PUT" && r.url().includes("one.bin")
      && r.request().headers()["x-sluice-blake3"] !== "later"),
    page.keyboard.press("F5"),
  ]);
  page.off("request", saying);
  const pageHash = put.request().headers()["x-sluice-blake3"];
  const answer = await put.json();
  const serverHash = answer.blake3;
  check(said.length === 1, `one request, the hash with the bytes: ${said}`);
  check(answer.done === true && answer.received === 1 << 20, `the hash came with the file's bytes: ${JSON.stringify(answer)}`);
  check(/^[0-9a-f]{64}$/.test(pageHash ?? ""), `the page sent its BLAKE3: ${pageHash}`);
  check(pageHash === serverHash, `the page's BLAKE3 is the server's: ${pageHash} ${serverHash}`);
  await jobsDone();
  check((await page.textContent("#queue")).includes("BLAKE3 verified"), "the panel says it was verified");
  check(shaFile(path.join(root, "one.bin")) === shaFile(path.join(local, "one.bin")), "one.bin hashes the same");
  await clearDone();

  step = "upload a folder of 200 files";
  await local0.locator("input.pick-folder").setInputFiles(path.join(local, "tree200"));
  await row(local0, "tree200").click();
  await page.keyboard.press("F5");
  await jobsDone(200);
  await shot("uploaded");
  let count = 0;
  for (let i = 0; i < 200; i += 1) {
    const rel = path.join("tree200", `d${i % 10}`, `f${i}.bin`);
    check(shaFile(path.join(root, rel)) === shaFile(path.join(local, rel)), `${rel} hashes the same`);
    count += 1;
  }
  check(count === 200, "200 files");
  await clearDone();

  step = "overwrite question";
  // A file this small goes unasked (one request); the server answers that one.bin is there,
  // keeps what came, and the question follows. The answer's request carries only the hash.
  /** @type {Promise<{ status: number, body: any }>[]} */
  const onePuts = [];
  const putSeen = (/** @type {import("playwright-core").Response} */ r) => {
    if (r.request().method() === "PUT" && r.url().includes("one.bin")) {
      onePuts.push(r.json().then((body) => ({ status: r.status(), body }), () => ({ status: r.status(), body: null })));
    }
  };
  page.on("response", putSeen);
  await row(local0, "one.bin").click();
  await page.keyboard.press("F5");
  await page.waitForSelector("#ask[open]");
  check((await page.textContent("#ask-text")).includes("exists"), "the question names the file");
  await shot("overwrite");
  await page.click('#ask button[data-choice="keep-both"]');
  await jobsDone();
  page.off("response", putSeen);
  const answered = await Promise.all(onePuts);
  console.log(`e2e: the overwrite question's requests: ${JSON.stringify(answered.map((a) => [a.status, a.body?.error ?? a.body?.received]))}`);
  check(answered.length === 2 && answered[0].status === 409 && answered[0].body?.error === "exists",
    `the unasked request was answered "exists": ${JSON.stringify(answered)}`);
  check(answered[1].body?.received === 0 && answered[1].body?.stored === true,
    `the answer's request moved no byte again and stored: ${JSON.stringify(answered[1])}`);
  check(shaFile(path.join(root, "one (1).bin")) === shaFile(path.join(local, "one.bin")), "kept both");
  check(!(await page.textContent("#queue")).includes("resumed at"), "the row does not call the answer's request a resume");
  const storedAs = await page.textContent("#queue tr td.state");
  check(storedAs?.includes("stored as one (1).bin"), `the row names the file's new name: ${storedAs}`);
  await clearDone();

  step = "cancel and resume an upload";
  const size = fs.statSync(path.join(local, "resume.bin")).size;
  // Each resumed PUT's answer says how many bytes the server wrote for it.
  let started = 0;
  let received = [];
  page.on("request", (r) => {
    if (r.method() === "PUT" && r.url().includes("resume.bin")) started += 1;
  });
  page.on("response", (r) => {
    if (r.request().method() === "PUT" && r.url().includes("resume.bin")) {
      received.push(r.json().then((b) => b.received ?? 0, () => 0));
    }
  });
  // A cancelled request has no answer: what it carried shows in the partial file.
  page.on("requestfailed", (r) => {
    if (r.method() === "PUT" && r.url().includes("resume.bin")) received.push(Promise.resolve(0));
  });
  await page.fill("#rate", "2");
  await local0.locator("input.pick-files").setInputFiles(path.join(local, "resume.bin"));
  await row(local0, "resume.bin").click();
  await page.keyboard.press("F5");
  const partial = () => partialSize("resume.bin");
  while (partial() < (1 << 20)) await page.waitForTimeout(50);
  await page.click("#queue tr button.cancel");
  await page.waitForSelector('#queue tr[data-state="cancelled"]');
  await shot("cancelled");
  // What the server holds once the cancelled request has ended (it stops growing).
  const held = await settled(async () => partial());
  check(held > 0 && held < size, `a partial upload is held: ${held}`);
  await page.fill("#rate", "0");
  // Every answer of before the retry is in; then count only the retry's.
  for (let i = 0; received.length < started && i < 200; i += 1) await page.waitForTimeout(50);
  received = [];
  started = 0;
  await page.click("#queue tr button.retry");
  await jobsDone();
  for (let i = 0; received.length < started && i < 200; i += 1) await page.waitForTimeout(50);
  const after = (await Promise.all(received)).reduce((a, b) => a + b, 0);
  console.log(`e2e: resumed upload: ${held} bytes kept, ${after} moved after the retry, of ${size}`);
  check(after === size - held, `only the rest moved: ${after} + ${held} != ${size}`);
  check(shaFile(path.join(root, "resume.bin")) === shaFile(path.join(local, "resume.bin")), "resume.bin hashes the same");
  check((await page.textContent("#queue")).includes("resumed at"), "the panel says it resumed");
  const totalBar = await page.$eval("#total-bar", (e) => [e.value, e.max]);
  check(totalBar[0] === totalBar[1] && totalBar[1] === size, `the total bar is full: ${totalBar}`);
  await shot("transfers");
  await clearDone();

  step = "a standing overwrite policy";
  // Replace, chosen once in the panel: no question, the server's file replaced.
  fs.writeFileSync(path.join(root, "one.bin"), "older\n");
  await page.selectOption("#policy", "always");
  await row(local0, "one.bin").click();
  await page.keyboard.press("F5");
  await jobsDone();
  check(await page.locator("#ask[open]").count() === 0, "no question asked");
  check(shaFile(path.join(root, "one.bin")) === shaFile(path.join(local, "one.bin")), "one.bin replaced");
  await page.selectOption("#policy", "");
  await clearDone();

  step = "download a file";
  await row(server0, "one.bin").click();
  const [download] = await Promise.all([page.waitForEvent("download"), page.keyboard.press("F5")]);
  const saved = path.join(out, "downloaded-one.bin");
  await download.saveAs(saved);
  check(shaFile(saved) === shaFile(path.join(root, "one.bin")), "the downloaded file hashes the same");

  step = "download a folder";
  await local0.locator("button.browser-storage").click();
  await page.waitForFunction(() => document.querySelector("#pane-0")?.getAttribute("aria-label")?.startsWith("browser storage"));
  // Each file is small and comes whole with the server's BLAKE3: no request asks for it.
  let hashAsked = 0;
  const askSeen = (/** @type {import("playwright-core").Request} */ r) => { if (r.url().includes("/api/hash")) hashAsked += 1; };
  page.on("request", askSeen);
  await row(server0, "served").click();
  await page.keyboard.press("F5");
  await jobsDone(21);
  page.off("request", askSeen);
  check(hashAsked === 0, `the hash came with each small file: ${hashAsked} requests for it`);
  check((await page.locator('#queue tr td.state:has-text("BLAKE3 verified")').count()) === 21, "each file verified");
  await row(local0, "served").waitFor();
  await shot("main");
  const hashes = await opfsHashes("served");
  const expected = {};
  const walkDisk = (dir, prefix) => {
    for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
      const p = prefix ? `${prefix}/${e.name}` : e.name;
      if (e.isDirectory()) walkDisk(path.join(dir, e.name), p);
      else expected[p] = shaFile(path.join(dir, e.name));
    }
  };
  walkDisk(path.join(root, "served"), "");
  check(Object.keys(expected).length === 21, "21 files served");
  check(JSON.stringify(hashes, Object.keys(hashes).sort()) === JSON.stringify(expected, Object.keys(expected).sort()),
    `the folder downloaded hashes the same: ${JSON.stringify(hashes).slice(0, 300)}`);

  step = "cancel and resume a download";
  await clearDone();
  const opfsSize = (name) => page.evaluate(async (name) => {
    const dir = await navigator.storage.getDirectory();
    try {
      return (await (await dir.getFileHandle(name)).getFile()).size;
    } catch {
      return -1;
    }
  }, name);
  await page.fill("#rate", "2");
  await row(server0, "down.bin").click();
  await page.keyboard.press("F5");
  // What a download writes shows in its file once closed (a cancel closes it): watch the bar.
  // The rate over time: the chart draws the last minute, and says its peak, while it runs.
  await page.waitForFunction(() => Number(document.querySelector("#queue tr progress")?.value) >= (1 << 20)
    && !/^peak 0 /.test(document.querySelector("#rate-peak")?.textContent ?? "peak 0 "),
    null, { timeout: 30000, polling: 50 });
  const peak = await page.textContent("#rate-peak");
  check(/^peak [1-9][0-9.]* (KiB|MiB|GiB)\/s$/.test(peak ?? ""), `the chart's peak is a rate: ${peak}`);
  const chartPoints = await page.$eval("#rate-chart polyline", (e) => (e.getAttribute("points") ?? "").trim().split(" ").length);
  check(chartPoints >= 4, `the rate chart has points: ${chartPoints}`);
  await page.click("#queue tr button.cancel");
  await page.waitForSelector('#queue tr[data-state="cancelled"]');
  const kept = await opfsSize(".down.bin.sluice-download");
  check(kept > 0 && kept < (6 << 20), `a partial download is kept: ${kept}`);
  await page.fill("#rate", "0");
  // Only the rest is asked for: a Range from what is kept, with the tag of that version.
  const ranges = [];
  page.on("request", (r) => {
    if (r.url().includes("/api/file") && r.url().includes("down.bin")) ranges.push(r.headers()["range"] ?? "");
  });
  await page.click("#queue tr button.retry");
  await jobsDone(1);
  check(ranges.length === 1 && ranges[0] === `bytes=${kept}-`, `the retry asked for the rest: ${ranges}`);
  check((await page.textContent("#queue")).includes("resumed at"), "the panel says the download resumed");
  const downHash = await page.evaluate(async () => {
    const file = await (await (await navigator.storage.getDirectory()).getFileHandle("down.bin")).getFile();
    const digest = await crypto.subtle.digest("SHA-256", await file.arrayBuffer());
    return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
  });
  check(downHash === shaFile(path.join(root, "down.bin")), "the resumed download hashes the same");
  check((await page.textContent("#queue")).includes("BLAKE3 verified as it arrived"),
    "the download was verified as it came, what was kept hashed from the partial file");

  step = "a download corrupted on the way";
  await clearDone();
  // One byte changed between the server and the page: the page's BLAKE3 differs from the
  // server's, it says so, and stores nothing.
  await page.route(/\/api\/file\?path=bad\.bin/, async (route) => {
    const response = await route.fetch();
    const body = Buffer.from(await response.body());
    body[1234] ^= 0x40;
    await route.fulfill({ response, body });
  });
  await row(server0, "bad.bin").click();
  await page.keyboard.press("F5");
  await page.waitForSelector('#queue tr[data-state="failed"]', { timeout: 30000 });
  const failedText = await page.textContent('#queue tr[data-state="failed"]');
  check(failedText.includes("BLAKE3 mismatch"), `the mismatch is shown: ${failedText}`);
  check(await opfsSize("bad.bin") === -1 && await opfsSize(".bad.bin.sluice-download") === -1,
    "nothing of the corrupted download is kept");
  await page.unroute(/\/api\/file\?path=bad\.bin/);
  await page.click('#queue tr[data-state="failed"] button.retry');
  await jobsDone(1);
  check(await opfsSize("bad.bin") === 300000, "the retry stores it whole");
  await shot("verified");

  step = "drag and drop";
  await clearDone();
  await page.dragAndDrop('#pane-1 tr:has(td.name:text-is("one.bin"))', "#pane-0 .list");
  await jobsDone(1);
  await row(local0, "one.bin").waitFor();
  const dropped = await page.evaluate(async () => {
    const file = await (await (await navigator.storage.getDirectory()).getFileHandle("one.bin")).getFile();
    const digest = await crypto.subtle.digest("SHA-256", await file.arrayBuffer());
    return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
  });
  check(dropped === shaFile(path.join(root, "one.bin")), "the dragged file hashes the same");

  step = "webtransport: download";
  await clearDone();
  await page.selectOption("#transport-mode", "webtransport");
  await page.waitForFunction(() => document.querySelector("#transport")?.dataset.transport === "webtransport");
  const wtHash = (name) => page.evaluate(async (name) => {
    const file = await (await (await navigator.storage.getDirectory()).getFileHandle(name)).getFile();
    const digest = await crypto.subtle.digest("SHA-256", await file.arrayBuffer());
    return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
  }, name);
  // No HTTPS download request: the bytes go over WebTransport, counted there by the server.
  const httpsFiles = [];
  page.on("request", (r) => {
    if (r.url().includes("/api/file?") || (r.method() === "PUT" && r.url().includes("/api/upload?"))) httpsFiles.push(r.url());
  });
  const sent0 = await series(WT_SENT);
  // Paced to 3 MB/s for the transfer: its four streams move four blocks at once, and the first
  // four are written (in order) by the time 17 MiB have come.
  await page.fill("#rate", "3");
  await row(server0, "wt-down.bin").click();
  await page.keyboard.press("F5");
  await page.waitForFunction(() => Number(document.querySelector("#queue tr progress")?.value) >= (17 << 20),
    null, { timeout: 60000, polling: 50 });
  await page.click("#queue tr button.cancel");
  await page.waitForSelector('#queue tr[data-state="cancelled"]');
  const wtKept = await opfsSize(".wt-down.bin.sluice-download");
  check(wtKept >= (4 << 20) && wtKept < WT_SIZE && wtKept % (4 << 20) === 0, `a partial download of whole blocks is kept: ${wtKept}`);
  // The row counted the pieces as they came (17 MiB and more), and then says what is kept.
  const rowShows = await page.$eval("#queue tr progress", (bar) => /** @type {HTMLProgressElement} */ (bar).value);
  check(rowShows === wtKept, `the cancelled row shows what its partial file keeps: ${rowShows}, kept ${wtKept}`);
  const sentCancelled = await settled(() => series(WT_SENT));
  await page.fill("#rate", "0");
  await page.click("#queue tr button.retry");
  await jobsDone(1);
  const sentResumed = (await series(WT_SENT)) - sentCancelled;
  console.log(`e2e: WebTransport download: ${sentCancelled - sent0} bytes before the cancel, ${wtKept} kept, ${sentResumed} sent after the retry, of ${WT_SIZE}`);
  check(sentResumed === WT_SIZE - wtKept, `only the rest was sent: ${sentResumed} + ${wtKept} != ${WT_SIZE}`);
  check((await page.textContent("#queue")).includes("resumed at"), "the panel says the download resumed");
  check((await page.textContent("#queue")).includes("BLAKE3 verified as it arrived"),
    "the download was verified from its blocks' hashes, the kept ones read back, without reading the file again");
  check(await wtHash("wt-down.bin") === shaFile(path.join(root, "wt-down.bin")), "the WebTransport download hashes the same");
  check(httpsFiles.length === 0, `no file moved over HTTPS: ${httpsFiles}`);
  await shot("webtransport");

  step = "webtransport: upload, cancelled and resumed";
  await clearDone();
  await page.fill("#rate", "3");
  await local0.locator("input.pick-files").setInputFiles(path.join(local, "wt-up.bin"));
  await row(local0, "wt-up.bin").click();
  await page.keyboard.press("F5");
  // The machines keep what the partial file holds from its start, as its resume record says
  // (the pieces land out of order: its size says less).
  const wtRecord = () => {
    try {
      return JSON.parse(fs.readFileSync(path.join(root, ".wt-up.bin.sluice-resume"), "utf8")).prefix;
    } catch {
      return 0;
    }
  };
  for (let i = 0; wtRecord() < (8 << 20); i += 1) {
    check(i < 1200, `the upload did not get far in 60 s: ${await page.textContent("#queue")}`);
    await page.waitForTimeout(50);
  }
  await page.click("#queue tr button.cancel");
  await page.waitForSelector('#queue tr[data-state="cancelled"]');
  const wtHeld = await settled(async () => wtRecord());
  const receivedCancelled = await settled(() => series(WT_RECEIVED));
  check(wtHeld >= (8 << 20) && wtHeld < WT_SIZE && partialSize("wt-up.bin", "part") >= wtHeld, `a partial upload is held: ${wtHeld}`);
  await page.fill("#rate", "0");
  await page.click("#queue tr button.retry");
  await jobsDone(1);
  const receivedResumed = (await series(WT_RECEIVED)) - receivedCancelled;
  // What the server offered of its partial file and the page kept: whole blocks of it.
  const wtKeptUp = Number(await page.$eval("#queue tr", (r) => r.dataset.resumed));
  console.log(`e2e: WebTransport upload: ${wtHeld} held after the cancel, ${wtKeptUp} kept, ${receivedResumed} received after the retry, of ${WT_SIZE}`);
  check(wtKeptUp === Math.floor(wtHeld / (4 << 20)) * (4 << 20), `the whole blocks of what the server held were kept: ${wtKeptUp} of ${wtHeld}`);
  check(receivedResumed === WT_SIZE - wtKeptUp, `only the rest was received: ${receivedResumed} + ${wtKeptUp} != ${WT_SIZE}`);
  check(shaFile(path.join(root, "wt-up.bin")) === shaFile(path.join(local, "wt-up.bin")), "the WebTransport upload hashes the same");
  check((await page.textContent("#queue")).includes("BLAKE3 verified"), "the upload was verified");
  check(httpsFiles.length === 0, `no file moved over HTTPS: ${httpsFiles}`);
  check(await series("sluice_webtransport_sessions_total") >= 1, "a WebTransport session was counted");

  step = "webtransport: keep both";
  // The overwrite question answered "Keep both" for a file of a hostile name: the server
  // stores it under the next free name and says which; the row shows that name, as text.
  await clearDone();
  await local0.locator("input.pick-files").setInputFiles(path.join(local, XSS));
  await row(local0, XSS).click();
  await page.keyboard.press("F5");
  await page.waitForSelector("#ask[open]");
  await page.click('#ask button[data-choice="keep-both"]');
  await jobsDone(1);
  const keptBoth = await page.textContent("#queue tr td.state");
  check(keptBoth?.includes(`stored as ${XSS} (1)`), `the row names the file's new name: ${keptBoth}`);
  check(await page.locator("#queue img").count() === 0, "no img element in the transfers");
  check(shaFile(path.join(root, `${XSS} (1)`)) === shaFile(path.join(local, XSS)), "kept both over WebTransport");
  check(httpsFiles.length === 0, `no file moved over HTTPS: ${httpsFiles}`);

  step = "webtransport: a folder of 200 files both ways, in few machine runs";
  // The same folder again, over WebTransport: its small files go several to a run of the
  // machines (the server counts each run as one transfer), each file still its own row.
  await clearDone();
  fs.rmSync(path.join(root, "tree200"), { recursive: true });
  const puts0 = await series('sluice_transfers_total{direction="put"}');
  await local0.locator("input.pick-folder").setInputFiles(path.join(local, "tree200"));
  await row(local0, "tree200").click();
  await page.keyboard.press("F5");
  await jobsDone(200);
  const upRuns = (await series('sluice_transfers_total{direction="put"}')) - puts0;
  console.log(`e2e: 200 files uploaded in ${upRuns} runs of the machines`);
  check(upRuns >= 1 && upRuns < 200, `the folder went up in fewer runs than files: ${upRuns}`);
  for (let i = 0; i < 200; i += 1) {
    const rel = path.join("tree200", `d${i % 10}`, `f${i}.bin`);
    check(shaFile(path.join(root, rel)) === shaFile(path.join(local, rel)), `${rel} hashes the same`);
  }
  check((await page.locator('#queue tr[data-state="done"]').count()) === 200, "each file's row is done");
  await clearDone();
  // An empty file among them (it ends where the file before it does).
  fs.writeFileSync(path.join(root, "tree200", "d3", "empty.bin"), "");
  const gets0 = await series('sluice_transfers_total{direction="get"}');
  await local0.locator("button.browser-storage").click();
  await page.waitForFunction(() => document.querySelector("#pane-0")?.getAttribute("aria-label")?.startsWith("browser storage"));
  await row(server0, "tree200").click();
  await page.keyboard.press("F5");
  await jobsDone(201);
  const downRuns = (await series('sluice_transfers_total{direction="get"}')) - gets0;
  console.log(`e2e: 201 files (one empty) downloaded in ${downRuns} runs of the machines`);
  check(downRuns >= 1 && downRuns < 201, `the folder came down in fewer runs than files: ${downRuns}`);
  const treeHashes = await opfsHashes("tree200");
  check(Object.keys(treeHashes).length === 201, `201 files in the browser's storage: ${Object.keys(treeHashes).length}`);
  for (const [rel, sha] of Object.entries(treeHashes)) {
    check(sha === shaFile(path.join(root, "tree200", rel)), `${rel} downloaded hashes the same`);
  }
  fs.rmSync(path.join(root, "tree200", "d3", "empty.bin"));
  check(httpsFiles.length === 0, `no file moved over HTTPS: ${httpsFiles.slice(0, 3)}`);

  step = "webtransport: a folder again, whole small files kept from an earlier try";
  // Partial files that hold their whole file (as a cut-off folder download leaves them) are
  // offered, and the server sends only the other files.
  await clearDone();
  await page.selectOption("#policy", "always");
  const heldRels = TREE_RELS.filter((_, i) => i % 4 === 0);
  await page.evaluate(async (rels) => {
    const top = await (await navigator.storage.getDirectory()).getDirectoryHandle("tree200");
    for (const rel of rels) {
      const [d, name] = rel.split("/");
      const dir = await top.getDirectoryHandle(d);
      const bytes = await (await (await dir.getFileHandle(name)).getFile()).arrayBuffer();
      const out = await (await dir.getFileHandle(`.${name}.sluice-download`, { create: true })).createWritable();
      await out.write(bytes);
      await out.close();
    }
  }, heldRels);
  const treeBytes = (rels) => rels.reduce((n, rel) => n + fs.statSync(path.join(root, "tree200", rel)).size, 0);
  const sentBefore = await series(WT_SENT);
  await row(server0, "tree200").click();
  await page.keyboard.press("F5");
  await jobsDone(200);
  const sentAgain = (await series(WT_SENT)) - sentBefore;
  const expectedAgain = treeBytes(TREE_RELS) - treeBytes(heldRels);
  console.log(`e2e: the folder again with ${heldRels.length} whole partial files: ${sentAgain} bytes sent, ${expectedAgain} not held`);
  check(sentAgain === expectedAgain, `only the files not held were sent: ${sentAgain} != ${expectedAgain}`);
  const againHashes = await opfsHashes("tree200");
  check(Object.keys(againHashes).length === 201, `201 files and no partial file left: ${Object.keys(againHashes).length}`);
  for (const rel of TREE_RELS) check(againHashes[rel] === shaFile(path.join(root, "tree200", rel)), `${rel} hashes the same`);
  await page.selectOption("#policy", "");

  step = "webtransport: a folder's run, one file cancelled, the policy per file";
  // Paced (20 files of 256 KiB at 1 MB/s: seconds), so the run is under way when one file of
  // it is cancelled: that file's row says cancelled, the others go again in a new run and are
  // done; its retry brings it.
  await clearDone();
  await page.fill("#rate", "1");
  await page.selectOption("#policy", "always");
  const puts1 = await series('sluice_transfers_total{direction="put"}');
  await local0.locator("input.pick-folder").setInputFiles(path.join(local, "paced20"));
  await row(local0, "paced20").click();
  await page.keyboard.press("F5");
  await page.waitForFunction(() => document.querySelectorAll('#queue tr[data-state="running"]').length === 20,
    null, { timeout: 60000, polling: 20 });
  const last = page.locator("#queue tr").last();
  const lastName = await last.locator("td.file").textContent();
  await last.locator("button.cancel").click();
  const doneThen = await page.locator('#queue tr[data-state="done"]').count();
  await page.fill("#rate", "0");
  await page.waitForFunction(() => {
    const rows = [...document.querySelectorAll("#queue tr")];
    return rows.filter((r) => r.dataset.state === "done").length === 19
      && rows[rows.length - 1].dataset.state === "cancelled";
  }, null, { timeout: 120000, polling: 100 });
  await page.locator("#queue tr").last().locator("button.retry").click();
  await jobsDone(20);
  const cancelRuns = (await series('sluice_transfers_total{direction="put"}')) - puts1;
  console.log(`e2e: ${lastName} cancelled in its folder's run (${doneThen} of 20 done then); 20 files in ${cancelRuns} runs`);
  check(doneThen < 19, `the click came while the run went on: ${doneThen} files done then`);
  check(cancelRuns >= 3 && cancelRuns < 20, `the run cancelled, the others again, then the retry: ${cancelRuns} runs`);
  for (const rel of PACED_RELS) {
    check(shaFile(path.join(root, "paced20", rel)) === shaFile(path.join(local, "paced20", rel)), `paced20/${rel} hashes the same`);
  }
  // Skip: the server's plan keeps each file, in one run, and each row says skipped.
  await clearDone();
  await page.selectOption("#policy", "never");
  const puts2 = await series('sluice_transfers_total{direction="put"}');
  const received2 = await series(WT_RECEIVED);
  await local0.locator("input.pick-folder").setInputFiles(path.join(local, "tree200"));
  await row(local0, "tree200").click();
  await page.keyboard.press("F5");
  await jobsDone(200);
  check(await page.locator('#queue tr[data-state="skipped"]').count() === 200, "each file skipped by the policy");
  check((await series('sluice_transfers_total{direction="put"}')) - puts2 === 1, "in one run");
  const received2After = await series(WT_RECEIVED);
  check(received2After === received2, `no byte moved: ${received2After - received2} bytes received`);
  await page.selectOption("#policy", "");
  await clearDone();

  step = "an upload cut off over HTTPS goes on over WebTransport";
  // The retry goes by the other way: the server offers the machines the whole blocks of what
  // the HTTPS try wrote, the page keeps them (same BLAKE3), and only the rest moves.
  await clearDone();
  await page.selectOption("#transport-mode", "https");
  await page.waitForFunction(() => document.querySelector("#transport")?.dataset.transport === "https");
  await page.fill("#rate", "3");
  await local0.locator("input.pick-files").setInputFiles(path.join(local, "switch.bin"));
  await row(local0, "switch.bin").click();
  await page.keyboard.press("F5");
  for (let i = 0; partialSize("switch.bin") < (9 << 20); i += 1) {
    check(i < 1200, `the HTTPS upload did not get far in 60 s: ${await page.textContent("#queue")}`);
    await page.waitForTimeout(50);
  }
  await page.click("#queue tr button.cancel");
  await page.waitForSelector('#queue tr[data-state="cancelled"]');
  const httpsHeld = await settled(async () => partialSize("switch.bin"));
  const receivedBeforeSwitch = await settled(() => series(WT_RECEIVED));
  await page.fill("#rate", "0");
  await page.selectOption("#transport-mode", "webtransport");
  await page.waitForFunction(() => document.querySelector("#transport")?.dataset.transport === "webtransport");
  await page.click("#queue tr button.retry");
  await jobsDone(1);
  const receivedSwitched = (await series(WT_RECEIVED)) - receivedBeforeSwitch;
  const keptSwitched = Number(await page.$eval("#queue tr", (r) => r.dataset.resumed));
  console.log(`e2e: switched upload: ${httpsHeld} held over HTTPS, ${keptSwitched} kept, ${receivedSwitched} received over WebTransport, of ${SWITCH_SIZE}`);
  check(keptSwitched >= (8 << 20) && keptSwitched === Math.floor(httpsHeld / (4 << 20)) * (4 << 20),
    `the whole blocks of what HTTPS wrote were kept: ${keptSwitched} of ${httpsHeld}`);
  check(receivedSwitched === SWITCH_SIZE - keptSwitched, `only the rest went over WebTransport: ${receivedSwitched} + ${keptSwitched} != ${SWITCH_SIZE}`);
  check(shaFile(path.join(root, "switch.bin")) === shaFile(path.join(local, "switch.bin")), "switch.bin hashes the same");
  const leftBeside = fs.readdirSync(root).filter((n) => n.startsWith(".switch.bin."));
  check(leftBeside.length === 0, `no partial file, record or lock is left: ${leftBeside}`);

  step = "auto: each direction measures both transports and takes the faster";
  // Paced to 8 MB/s: the first 3 s of each file go by WebTransport, the rest by HTTPS from
  // where that stopped (the probe); both rates are then shown, and the files are whole.
  await clearDone();
  await page.selectOption("#transport-mode", "auto");
  await page.waitForFunction(() => document.querySelector("#transport")?.textContent?.includes("takes the faster"), null, { timeout: 30000 });
  await page.fill("#rate", "8");
  // What the panel says once the transfer of `dir` ("up" or "down") is done: it probed
  // WebTransport, was verified, and the direction has both rates and takes the faster.
  const probedBoth = async (dir, what) => {
    await page.keyboard.press("F5");
    await jobsDone(1);
    const said = await page.textContent("#queue");
    console.log(`e2e: auto ${what}: ${said}; ${await page.textContent("#choice")}`);
    check(said.includes("WebTransport measured"), `the ${what} probed WebTransport first: ${said}`);
    check(said.includes("BLAKE3 verified"), `the ${what} was verified`);
    const chosen = await page.$eval("#choice", (e) => ({ ...e.dataset }));
    const [wt, https] = [Number(chosen[`${dir}Wt`]), Number(chosen[`${dir}Https`])];
    check(wt > 0 && https > 0, `both ways measured for the ${what}: ${JSON.stringify(chosen)}`);
    check(chosen[`${dir}Pick`] === (https > wt ? "https" : "wt"), `the ${what} takes the faster: ${JSON.stringify(chosen)}`);
    await clearDone();
  };
  await local0.locator("input.pick-files").setInputFiles(path.join(local, "auto.bin"));
  await row(local0, "auto.bin").click();
  await probedBoth("up", "upload");
  check(shaFile(path.join(root, "auto.bin")) === shaFile(path.join(local, "auto.bin")), "auto.bin hashes the same");
  await local0.locator("button.browser-storage").click();
  await row(server0, "auto-get.bin").click();
  await probedBoth("down", "download");
  check(await wtHash("auto-get.bin") === shaFile(path.join(root, "auto-get.bin")), "auto-get.bin hashes the same");
  await page.fill("#rate", "0");
  // The next steps upload a picked file again.
  await local0.locator("input.pick-files").setInputFiles(path.join(local, "wt-up.bin"));

  step = "auto: the figures outlive the page";
  // A second tab of the same browser (the origin's storage) goes by them without probing.
  const figures = (p) => p.$eval("#choice", (e) => ({ ...e.dataset }));
  const measured = await figures(page);
  check(Number(measured.downWt) > 0 && Number(measured.downHttps) > 0, `this tab has figures to keep: ${JSON.stringify(measured)}`);
  const second = await context.newPage();
  second.on("pageerror", (e) => failures.push(`page error in the second tab: ${e.message}`));
  await second.goto(base);
  await second.waitForSelector("#app-view:not([hidden])");
  await second.waitForFunction(() => document.querySelector("#choice")?.textContent?.includes("downloads"));
  const inSecond = await figures(second);
  console.log(`e2e: a second tab: ${await second.textContent("#choice")}`);
  check(JSON.stringify(inSecond) === JSON.stringify(measured), `the second tab has the figures: ${JSON.stringify(inSecond)} vs ${JSON.stringify(measured)}`);
  await second.close();

  step = "webtransport: a certificate replaced after the page got its hash";
  // The first answer of /api/wt names a hash the server does not serve, as when it replaced its
  // certificate between that answer and the handshake: the page asks again and connects.
  let wtAnswers = 0;
  await page.route("**/api/wt", async (route) => {
    const response = await route.fetch();
    const body = await response.json();
    wtAnswers += 1;
    await route.fulfill({ response, json: { ...body, hashes: wtAnswers === 1 ? ["00".repeat(32)] : body.hashes } });
  });
  await page.selectOption("#transport-mode", "https");
  await page.waitForFunction(() => document.querySelector("#transport")?.dataset.transport === "https");
  await page.selectOption("#transport-mode", "webtransport");
  await page.waitForFunction(() => document.querySelector("#transport")?.textContent?.startsWith("Transfers go over WebTransport"),
    null, { timeout: 30000 });
  check(wtAnswers === 2, `the page asked for the hash again once: ${wtAnswers} answers`);
  await page.unroute("**/api/wt");

  step = "webtransport: falls back to HTTPS";
  // A certificate hash that is not the server's: the session cannot connect; the page says
  // so, and the upload goes over HTTPS.
  await clearDone();
  await page.route("**/api/wt", async (route) => {
    const response = await route.fetch();
    const body = await response.json();
    await route.fulfill({ response, json: { ...body, hashes: ["00".repeat(32)] } });
  });
  await page.selectOption("#transport-mode", "https");
  await page.selectOption("#transport-mode", "webtransport");
  await page.waitForFunction(() => document.querySelector("#transport")?.textContent?.includes("did not connect"), null, { timeout: 30000 });
  const fallback = await page.textContent("#transport");
  await page.selectOption("#policy", "always");
  await row(local0, "wt-up.bin").click();
  await page.keyboard.press("F5");
  await jobsDone(1);
  await page.selectOption("#policy", "");
  check(httpsFiles.length >= 1, `the upload went over HTTPS: ${fallback}`);
  check(shaFile(path.join(root, "wt-up.bin")) === shaFile(path.join(local, "wt-up.bin")), "wt-up.bin hashes the same");
  await page.unroute("**/api/wt");
  await shot("fallback");
  await clearDone();
  await local0.locator("button.browser-storage").click();

  step = "sweep";
  // FFTM's sweep over the page's connection: every cell measured, charted, the best named.
  await page.click("#sweep summary");
  await page.fill("#sweep-mib", "2");
  await page.fill("#sweep-blocks", "256, 1024");
  await page.fill("#sweep-streams", "1, 2");
  await page.click("#sweep-run");
  await page.waitForSelector('#sweep-result[data-done="true"]', { timeout: 60000 });
  const recommended = await page.textContent("#sweep-result");
  check(/^Recommended: (256\.0 KiB|1\.0 MiB) blocks × [12] streams?: [0-9.]+ (KiB|MiB|GiB)\/s \(download, 2\.0 MiB per cell\)$/
    .test(recommended ?? ""), `a recommendation: ${recommended}`);
  console.log(`e2e: sweep: ${recommended}; cells: ${await page.$$eval("#sweep-svg rect title", (ts) => ts.map((t) => t.textContent).join(", "))}`);
  check(await page.locator("#sweep-svg rect").count() === 4, "four bars");
  check(await page.locator("#sweep-svg rect.failed").count() === 0, "no cell failed");
  await shot("sweep");
  // The upload side, one cell.
  await page.selectOption("#sweep-dir", "up");
  await page.fill("#sweep-blocks", "512");
  await page.fill("#sweep-streams", "2");
  await page.evaluate(() => delete document.querySelector("#sweep-result").dataset.done);
  await page.click("#sweep-run");
  await page.waitForSelector('#sweep-result[data-done="true"]', { timeout: 60000 });
  const up = await page.textContent("#sweep-result");
  console.log(`e2e: sweep: ${up}`);
  check(/^Recommended: 512\.0 KiB blocks × 2 streams: .* \(upload, 2\.0 MiB per cell\)$/.test(up ?? ""), `an upload sweep: ${up}`);

  step = "another server";
  // A wrong fingerprint is refused (this server's own, for the other's address).
  const ownFingerprint = (await serverAt).fingerprint;
  await page.selectOption("#pane-0 select.side", "add");
  await page.waitForSelector("#add-server[open]");
  await page.fill("#add-server-address", otherAt.address);
  await page.fill("#add-server-fingerprint", ownFingerprint);
  await page.fill("#add-server-token", OTHER_TOKEN);
  await page.click("#add-server-connect");
  await page.waitForFunction(() => /fingerprint|certificate/i.test(document.querySelector("#add-server-error")?.textContent ?? ""));
  console.log(`e2e: a wrong fingerprint: ${await page.textContent("#add-server-error")}`);
  await page.fill("#add-server-fingerprint", otherAt.fingerprint);
  await page.fill("#add-server-token", OTHER_TOKEN);
  await page.click("#add-server-connect");
  await page.waitForSelector("#add-server", { state: "hidden" });
  const remote0 = local0;
  await row(remote0, "slow.bin").waitFor();
  check((await remote0.getAttribute("aria-label"))?.startsWith(otherAt.address), "the pane names the other server");
  // Another server's pane lists and copies only.
  await remote0.locator(".list").click();
  await page.keyboard.press("F7");
  await page.waitForFunction(() => document.querySelector("#pane-0 .status.error")?.textContent?.includes("lists and copies only"));

  step = "copy to another server";
  // From this server's folder "served" (20 files and a subfolder) into the other's top.
  await page.selectOption("#policy", "");
  await server0.locator("input.path").fill("");
  await server0.locator("input.path").press("Enter");
  await row(server0, "served").click();
  await page.keyboard.press("F5");
  await page.waitForSelector('#jobs-list tr[data-phase="done"]', { timeout: 60000 });
  const servedFiles = fs.readdirSync(path.join(root, "served"), { recursive: true })
    .filter((n) => fs.statSync(path.join(root, "served", n)).isFile());
  check(servedFiles.length === 21, `21 files served: ${servedFiles.length}`);
  for (const n of servedFiles) {
    check(shaFile(path.join(otherRoot, "served", n)) === shaFile(path.join(root, "served", n)), `served/${n} hashes the same there`);
  }
  await row(remote0, "served").waitFor();
  // The same again with "ask": a job cannot ask, so it refuses the existing files, by name.
  await row(server0, "served").click();
  await page.keyboard.press("F5");
  await page.waitForSelector('#jobs-list tr[data-phase="failed"]', { timeout: 60000 });
  const refusal = await page.textContent('#jobs-list tr[data-phase="failed"] td.error');
  console.log(`e2e: the same copy again: ${refusal}`);
  check(/exist/.test(refusal ?? ""), `the job names the existing files: ${refusal}`);
  check(refusal?.includes("If a file exists") && !refusal.includes("--overwrite"), `the page's words, not the CLI's: ${refusal}`);

  step = "copy from another server, the tab closed";
  await row(remote0, "far").click();
  await page.keyboard.press("F5");
  await page.waitForFunction(() => document.querySelectorAll('#jobs-list tr[data-phase="done"]').length >= 2, null, { timeout: 60000 });
  for (let i = 0; i < 5; i += 1) {
    check(shaFile(path.join(root, "far", `f${i}.bin`)) === shaFile(path.join(otherRoot, "far", `f${i}.bin`)), `far/f${i}.bin hashes the same here`);
  }
  // 16 MiB at the other token's 32 Mbit/s takes about 4 s: the tab closes while it runs.
  await row(remote0, "slow.bin").click();
  await page.keyboard.press("F5");
  await page.waitForSelector('#jobs-list tr[data-phase="running"]', { timeout: 60000 });
  await shot("jobs");
  await page.close();
  const slowHere = path.join(root, "slow.bin");
  check(!fs.existsSync(slowHere), "slow.bin is not in place when the tab closes");
  for (let i = 0; !fs.existsSync(slowHere) && i < 600; i += 1) await new Promise((r) => setTimeout(r, 100));
  check(shaFile(slowHere) === shaFile(path.join(otherRoot, "slow.bin")), "slow.bin arrived whole after the tab closed");
  // A new tab of the same login lists the other server and the job, done.
  const again = await context.newPage();
  await again.goto(base);
  await again.waitForSelector("#app-view:not([hidden])");
  await again.waitForFunction(() => document.querySelectorAll('#jobs-list tr[data-phase="done"]').length >= 3);
  check((await again.textContent("#pane-0 select.side"))?.includes(otherAt.address), "the other server is still offered");
  const againPage = again;

  step = "metrics";
  // The page's transfers are the server's: counted in its metrics as the CLI's are.
  const puts = await series('sluice_transfers_total{direction="put"}');
  const gets = await series('sluice_transfers_total{direction="get"}');
  check(puts >= 203 && gets >= 23, `the page's transfers are counted: ${puts} puts, ${gets} gets`);
  check(await series("sluice_transfers_active") === 0, "none runs now");
  check(await series('sluice_file_bytes_total{direction="received"}') >= (6 << 20) + (2 << 20),
    "the bytes uploaded are counted");

  step = "logout";
  await againPage.click("#logout");
  await againPage.waitForSelector("#login-form", { state: "visible" });
  check(failures.length === 0, failures.join("; "));
  console.log("e2e: all steps passed");
} catch (e) {
  console.error(`e2e: FAILED at ${step}: ${e.stack ?? e}`);
  process.exitCode = 1;
  // What the page showed when it failed: a screenshot and the transfer rows' states.
  await failedPage?.screenshot({ path: path.join(out, "failed.png") }).catch(() => {});
  const rows = await failedPage?.$$eval("#queue tr", (trs) => trs.map((r) =>
    `${r.querySelector("td.file")?.textContent} ${r.dataset.state} ${r.dataset.done}/${r.dataset.size}`)).catch(() => []);
  if (rows?.length) console.error(`e2e: the transfer rows then (${rows.length}): ${rows.slice(-8).join("; ")}`);
} finally {
  await context?.close().catch(() => {});
  server.kill("SIGTERM");
  other.kill("SIGTERM");
}
