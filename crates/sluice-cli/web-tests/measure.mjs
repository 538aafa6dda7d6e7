// Measures the web app's transfers in headless chromium: one download and one upload of
// SIZE_MIB over WebTransport, then the same over HTTPS (the panel's WebTransport box
// unchecked), each timed from the key press to the transfer's end as the panel shows it
// (hashing included: an upload's whole-file BLAKE3 as it goes, a download's as it comes), with the
// CPU seconds the server and the browser (all its processes) spent on it.
// Not a test: it asserts only that the bytes arrived whole. Run with a release build:
//   cargo build --release -p sluice-cli
//   SLUICE_BIN=target/release/sluice SLUICE_WEB_OUT=/tmp/web-measure SIZE_MIB=1024 \
//     node crates/sluice-cli/web-tests/measure.mjs
// Optional: MEASURE_VIA=webtransport,https and MEASURE_DIRS=download,upload pick what runs,
// MEASURE_RESUME_AT=0.75 cancels each download once that share of it is written and times its
// retry instead (which resumes from what was kept),
// MEASURE_TIMEOUT_S bounds each transfer (default 1800); MEASURE_ROUNDS=N runs them N times in
// the same page; MEASURE_FILES=N moves a folder of N files of MEASURE_FILE_KIB (default 64) in
// 10 subfolders instead of the one file (a download of the server's folder into the browser's
// storage, an upload of a picked folder), timed until every file's row is done;
// MEASURE_WARM_MIB=N first downloads a file of N MiB over each transport, untimed, then logs
// out and in again (a new login: new sessions, a new group of lanes), so that what is timed
// starts where a page's first download after an earlier visit starts (path memory);
// MEASURE_PROFILE=1 records the page's JavaScript CPU profile of each transfer (DevTools'
// Profiler: the renderer's main thread) into SLUICE_WEB_OUT/profile-VIA-DIR.cpuprofile and
// prints the functions that spent the most of it themselves;
// SLUICE_SERVER_NS=NS with SLUICE_WEB_ADDR=IP:PORT runs the server in network namespace NS
// (`ip netns exec`) on that address, for a path through an emulated link
// (bench/web_wan.py runs this script that way, inside the other namespace).

import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { chromium } from "playwright-core";

const bin = process.env.SLUICE_BIN;
const out = process.env.SLUICE_WEB_OUT;
const mib = Number(process.env.SIZE_MIB ?? 1024);
if (!bin || !out) throw new Error("set SLUICE_BIN and SLUICE_WEB_OUT");
const TOKEN = "measure-token-0123456789abcdef";
const size = mib << 20;
const vias = (process.env.MEASURE_VIA ?? "webtransport,https").split(",");
const dirs = (process.env.MEASURE_DIRS ?? "download,upload").split(",");
const rounds = Number(process.env.MEASURE_ROUNDS ?? 1);
const resumeAt = process.env.MEASURE_RESUME_AT ? Number(process.env.MEASURE_RESUME_AT) : null;
const serverNs = process.env.SLUICE_SERVER_NS;
const webAddr = process.env.SLUICE_WEB_ADDR ?? "127.0.0.1:0";
const HZ = 100;
const timeoutMs = Number(process.env.MEASURE_TIMEOUT_S ?? 1800) * 1000;
const files = Number(process.env.MEASURE_FILES ?? 0);
// MEASURE_FAILED_OK=1: a folder's run ends when every row is done or failed (how many failed is
// in the result, and the files are not compared): an old build that fails a few files of a
// folder is timed too.
const failedOk = process.env.MEASURE_FAILED_OK === "1";
const fileKib = Number(process.env.MEASURE_FILE_KIB ?? 64);
const profiling = process.env.MEASURE_PROFILE === "1";
const warmMib = Number(process.env.MEASURE_WARM_MIB ?? 0);

/**
 * The functions of a DevTools CPU profile by the time they spent themselves (not in what they
 * called), most first: `[name (file:line), ms]`. "(program)" is the browser's own work on the
 * main thread (style, layout, paint, the network's callbacks), "(idle)" its waiting.
 * @param {{ nodes: { id: number, callFrame: { functionName: string, url: string, lineNumber: number } }[],
 *   samples: number[], timeDeltas: number[] }} profile
 */
function selfTimes(profile) {
  const frames = new Map(profile.nodes.map((n) => [n.id, n.callFrame]));
  const ms = new Map();
  profile.samples.forEach((id, i) => {
    const f = frames.get(id);
    const file = f?.url ? `${f.url.split("/").pop()}:${f.lineNumber + 1}` : "";
    const name = `${f?.functionName || "(anonymous)"}${file ? ` (${file})` : ""}`;
    ms.set(name, (ms.get(name) ?? 0) + (profile.timeDeltas[i] ?? 0) / 1000);
  });
  return [...ms].sort((a, b) => b[1] - a[1]);
}

/**
 * CPU seconds (user + system) of `pid` and every process below it, by /proc: the total, and by
 * kind (Chromium's `--type`, a utility process by its service: "renderer" runs the page's
 * JavaScript and WebAssembly, "network" Chromium's QUIC and TCP, "storage" its file system;
 * "other" is what has no type: the browser's own process, this script; "server" is Sluice's).
 */
function treeCpu(pid) {
  const stats = new Map();
  for (const name of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const text = fs.readFileSync(`/proc/${name}/stat`, "utf8");
      const f = text.slice(text.lastIndexOf(")") + 2).split(" ");
      stats.set(Number(name), { ppid: Number(f[1]), cpu: (Number(f[11]) + Number(f[12])) / HZ });
    } catch { /* gone meanwhile */ }
  }
  const seen = new Set([pid]);
  let grew = true;
  while (grew) {
    grew = false;
    for (const [p, st] of stats) {
      if (!seen.has(p) && seen.has(st.ppid)) { seen.add(p); grew = true; }
    }
  }
  let total = 0;
  /** @type {Record<string, number>} */
  const kinds = {};
  for (const p of seen) {
    const cpu = stats.get(p)?.cpu ?? 0;
    total += cpu;
    const k = kind(p);
    kinds[k] = (kinds[k] ?? 0) + cpu;
  }
  return { total, kinds };
}

/** What Chromium process `pid` is, by its command line (see `treeCpu`). */
function kind(pid) {
  if (pid === server?.pid) return "server";
  let args = "";
  try {
    args = fs.readFileSync(`/proc/${pid}/cmdline`, "utf8");
  } catch { /* gone meanwhile */ }
  const type = args.match(/--type=([a-z-]+)/)?.[1];
  if (type !== "utility") return type ?? "other";
  const service = args.match(/--utility-sub-type=([A-Za-z.]+)/)?.[1] ?? "";
  if (service.includes("NetworkService")) return "network";
  if (service.includes("Storage")) return "storage";
  return service || "utility";
}

/** `after` less `before`, kind by kind, as "kind s, ..." (largest first). */
function kindsSpent(before, after) {
  return Object.entries(after.kinds)
    .map(([k, v]) => [k, v - (before.kinds[k] ?? 0)])
    .filter(([k, v]) => k !== "server" && v >= 0.05)
    .sort((a, b) => b[1] - a[1])
    .map(([k, v]) => `${k} ${v.toFixed(1)}`)
    .join(", ");
}

fs.rmSync(out, { recursive: true, force: true });
const root = path.join(out, "root");
const local = path.join(out, "local");
for (const d of [root, local, path.join(out, "state")]) fs.mkdirSync(d, { recursive: true });
fs.writeFileSync(path.join(out, "tokens"), `${TOKEN}\n`, { mode: 0o600 });
// Random bytes (nothing compresses; QUIC and TLS do not compress anyway).
const big = path.join(root, "big.bin");
if (files) {
  // The folder: the server's for the download, the same bytes on this side for the upload.
  for (let i = 0; i < files; i += 1) {
    const rel = path.join(`d${i % 10}`, `f${i}.bin`);
    const bytes = Buffer.alloc(fileKib << 10);
    for (let k = 0; k < bytes.length; k += 4) bytes.writeUInt32LE((Math.random() * 2 ** 32) >>> 0, k);
    for (const top of [path.join(root, "down-tree"), path.join(local, "up-tree")]) {
      fs.mkdirSync(path.join(top, `d${i % 10}`), { recursive: true });
      fs.writeFileSync(path.join(top, rel), bytes);
    }
  }
} else {
  const fd = fs.openSync(big, "w");
  const piece = Buffer.alloc(16 << 20);
  for (let at = 0; at < size; at += piece.length) {
    for (let i = 0; i < piece.length; i += 4) piece.writeUInt32LE((Math.random() * 2 ** 32) >>> 0, i);
    fs.writeSync(fd, piece, 0, Math.min(piece.length, size - at));
  }
  fs.closeSync(fd);
  fs.copyFileSync(big, path.join(local, "up.bin"));
}
if (warmMib > 0) {
  const fd = fs.openSync(path.join(root, "warm.bin"), "w");
  const piece = Buffer.alloc(1 << 20);
  for (let at = 0; at < warmMib; at += 1) {
    for (let i = 0; i < piece.length; i += 4) piece.writeUInt32LE((Math.random() * 2 ** 32) >>> 0, i);
    fs.writeSync(fd, piece);
  }
  fs.closeSync(fd);
}
const sha = (p) => createHash("sha256").update(fs.readFileSync(p)).digest("hex");
const want = files ? "" : sha(big);
/** Every file below `dir`, by its path there, with its SHA-256. */
const shaTree = (dir) => {
  /** @type {Record<string, string>} */
  const found = {};
  const walk = (d, prefix) => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      if (e.isDirectory()) walk(path.join(d, e.name), `${prefix}${e.name}/`);
      else found[`${prefix}${e.name}`] = sha(path.join(d, e.name));
    }
  };
  walk(dir, "");
  return JSON.stringify(found, Object.keys(found).sort());
};
const rows = files || 1;
const moved = files ? (files * fileKib) / 1024 : mib;

const serveArgs = [
  "serve", "--root", root, "--tokens", path.join(out, "tokens"), "--state-dir", path.join(out, "state"),
  "--listen", webAddr.replace(/:\d+$/, ":0"), "--web", webAddr,
];
// `ip netns exec` execs the server: the pid is the server's.
const server = serverNs
  ? spawn("ip", ["netns", "exec", serverNs, bin, ...serveArgs], { stdio: ["ignore", "pipe", "inherit"] })
  : spawn(bin, serveArgs, { stdio: ["ignore", "pipe", "inherit"] });
process.on("exit", () => server.kill("SIGTERM"));
const base = await new Promise((resolve) => {
  let text = "";
  server.stdout.on("data", (d) => {
    text += d;
    const m = text.match(/web app on (https:\/\/[^ ]+\/) with fingerprint/);
    if (m) resolve(m[1]);
  });
});

const context = await chromium.launchPersistentContext(path.join(out, "profile"), {
  executablePath: process.env.SLUICE_CHROMIUM ?? "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-background-networking", "--disable-component-update", "--no-first-run"],
  ignoreHTTPSErrors: true,
  viewport: { width: 1280, height: 860 },
});
const results = [];
try {
  const page = context.pages()[0] ?? (await context.newPage());
  await page.goto(base);
  const login = async () => {
    await page.fill("#token", TOKEN);
    await page.click("#login-form button[type=submit]");
    await page.waitForSelector("#transport[data-transport]");
  };
  await login();
  const row = (pane, name) => page.locator(`${pane} tr`).filter({ has: page.locator("td.name", { hasText: name }) }).first();
  const done = async () => {
    // What the panel says every 10 s, on stderr: a slow or stuck transfer shows where it is.
    const watch = setInterval(() => {
      page.evaluate(() => `${document.querySelector("#queue")?.textContent} | ${document.querySelector("#transport")?.textContent}`)
        .then((t) => console.error(`measure: ${t}`), () => {});
    }, 10000);
    await page.waitForFunction(([n, failedOk]) => {
      const rows = [...document.querySelectorAll("#queue tr")];
      const failed = rows.find((r) => r.dataset.state === "failed");
      if (failed && !failedOk) throw new Error(`a transfer failed: ${failed.textContent}`);
      return rows.length === n && rows.every((r) => ["done", "failed"].includes(r.dataset.state ?? ""));
    }, [rows, failedOk], { timeout: timeoutMs, polling: 10 }).finally(() => clearInterval(watch));
    const failed = await page.$$eval('#queue tr[data-state="failed"]', (r) => r.map((e) => e.textContent));
    if (failed.length) console.error(`measure: failed: ${failed.join(" | ")}`);
    return failed.length;
  };
  const opfsClear = () => page.evaluate(async () => {
    const dir = await navigator.storage.getDirectory();
    for await (const name of dir.keys()) await dir.removeEntry(name, { recursive: true });
  });
  /** Times `run` (a key press and its transfer) with the CPU seconds each side spent. */
  const timed = async (via, dir, run) => {
    const cdp = profiling ? await page.context().newCDPSession(page) : null;
    if (cdp) {
      await cdp.send("Profiler.enable");
      await cdp.send("Profiler.setSamplingInterval", { interval: 1000 });
      await cdp.send("Profiler.start");
    }
    const [server0, all0] = [treeCpu(server.pid).total, treeCpu(process.pid)];
    const t0 = performance.now();
    // When the panel first says "verifying" (a download's check of the whole file after its
    // last byte): the time from then to done is that check's.
    let verifyAt = null;
    const look = setInterval(() => {
      page.evaluate(() => document.querySelector("#queue")?.textContent ?? "")
        .then((t) => { if (verifyAt === null && t.includes("verifying")) verifyAt = performance.now(); }, () => {});
    }, 50);
    const failed = await run().finally(() => clearInterval(look));
    const s = (performance.now() - t0) / 1000;
    const serverCpu = treeCpu(server.pid).total - server0;
    // The browser: every process below this script but the server (and this script itself).
    const all1 = treeCpu(process.pid);
    const browserCpu = all1.total - all0.total - serverCpu;
    results.push({
      via, dir, mib: moved, files: rows, failed, seconds: s.toFixed(2), mib_s: (moved / s).toFixed(1),
      verify_s: verifyAt === null ? "-" : ((t0 + s * 1000 - verifyAt) / 1000).toFixed(2),
      server_cpu_s: serverCpu.toFixed(1), browser_cpu_s: browserCpu.toFixed(1),
      browser_cpu_by_kind: kindsSpent(all0, all1),
    });
    console.log(JSON.stringify(results.at(-1)));
    if (cdp) {
      const { profile } = await cdp.send("Profiler.stop");
      fs.writeFileSync(path.join(out, `profile-${via}-${dir}.cpuprofile`), JSON.stringify(profile));
      const top = selfTimes(profile).slice(0, 15).map(([name, ms]) => `${ms.toFixed(0)} ms ${name}`);
      console.error(`measure: ${via} ${dir}, the page's CPU by function (self):\n  ${top.join("\n  ")}`);
      await cdp.detach();
    }
  };
  for (const via of vias) {
    // auto: the page measures both ways on the transfer itself (a fresh choice each time it
    // is selected) and the WebTransport session is connected.
    const select = async () => {
      await page.selectOption("#transport-mode", "https");
      await page.waitForFunction(() => document.querySelector("#transport")?.dataset.transport === "https");
      await page.selectOption("#transport-mode", via);
      const connected = via === "https" ? "https" : "webtransport";
      await page.waitForFunction((c) => document.querySelector("#transport")?.dataset.transport === c, connected);
    };
    await select();
    if (warmMib > 0) {
      // Untimed: an earlier visit's download, then a new login.
      await opfsClear();
      await page.click("#pane-0 button.browser-storage");
      await row("#pane-1", "warm.bin").click();
      await page.keyboard.press("F5");
      await page.waitForFunction(() => {
        const r = [...document.querySelectorAll("#queue tr")];
        if (r.some((e) => e.dataset.state === "failed")) throw new Error("the warm-up download failed");
        return r.length === 1 && r[0].dataset.state === "done";
      }, null, { timeout: timeoutMs, polling: 50 });
      await page.click("#clear-done");
      await opfsClear();
      await page.click("#logout");
      await page.waitForSelector("#login-form", { state: "visible" });
      await login();
      await select();
      console.error(`measure: ${via}: warmed with ${warmMib} MiB, logged in again`);
    }
    // MEASURE_ROUNDS > 1: the same transfers again in the same page (auto's later transfers
    // take what its first ones measured).
    for (let round = 1; round <= rounds; round += 1) {
    const tag = rounds > 1 ? `${via}#${round}` : via;
    if (dirs.includes("download")) {
      // Download into the browser's own storage.
      await opfsClear();
      await page.click("#pane-0 button.browser-storage");
      await row("#pane-1", files ? "down-tree" : "big.bin").click();
      if (resumeAt !== null) {
        // Cancelled part way, then timed from the retry: what was kept is hashed again.
        await page.keyboard.press("F5");
        await page.waitForFunction((at) => Number(document.querySelector("#queue tr progress")?.value) >= at,
          resumeAt * size, { timeout: timeoutMs, polling: 20 });
        await page.click("#queue tr button.cancel");
        await page.waitForSelector('#queue tr[data-state="cancelled"]');
        await timed(`${tag} resumed at ${resumeAt}`, "download", async () => {
          await page.click("#queue tr button.retry");
          return done();
        });
        console.error(`measure: ${await page.textContent("#queue")}`);
      } else {
        await timed(tag, "download", async () => {
          await page.keyboard.press("F5");
          return done();
        });
      }
      if (files && !results.at(-1).failed) {
        // Every file came whole (SHA-256 in the page, of the browser's storage).
        const got = await page.evaluate(async () => {
          /** @type {Record<string, string>} */
          const found = {};
          const walk = async (dir, prefix) => {
            for await (const h of dir.values()) {
              if (h.kind === "directory") await walk(h, `${prefix}${h.name}/`);
              else {
                const digest = await crypto.subtle.digest("SHA-256", await (await h.getFile()).arrayBuffer());
                found[`${prefix}${h.name}`] = [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
              }
            }
          };
          await walk(await (await navigator.storage.getDirectory()).getDirectoryHandle("down-tree"), "");
          return JSON.stringify(found, Object.keys(found).sort());
        });
        if (got !== shaTree(path.join(root, "down-tree"))) throw new Error(`${via}: the folder downloaded differs`);
      }
      await page.click("#clear-done");
      await opfsClear();
    }
    if (dirs.includes("upload")) {
      // Upload from a picked file, replacing what is there.
      await page.selectOption("#policy", "always");
      const name = files ? "up-tree" : "up.bin";
      if (files) await page.locator("#pane-0 input.pick-folder").setInputFiles(path.join(local, name));
      else await page.locator("#pane-0 input.pick-files").setInputFiles(path.join(local, name));
      await row("#pane-0", name).click();
      await timed(tag, "upload", async () => {
        await page.keyboard.press("F5");
        return done();
      });
      const same = results.at(-1).failed ? true : files ? shaTree(path.join(root, name)) === shaTree(path.join(local, name))
        : sha(path.join(root, name)) === want;
      if (!same) throw new Error(`${via}: the upload differs`);
      fs.rmSync(path.join(root, name), { recursive: true });
      await page.click("#clear-done");
    }
    }
  }
} finally {
  await context.close().catch(() => {});
  server.kill("SIGTERM");
}
console.table(results);
