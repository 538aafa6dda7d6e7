// The file manager's start: log in (or find the session of this page's cookie), then two
// panes, the keyboard, drag and drop, and the copy, folder, rename and delete commands. A copy
// between two server panes is a job of the destination server (jobs.js).

import * as api from "./api.js";
import { ask, byId } from "./dom.js";
import { module } from "./hash.js";
import { Jobs } from "./jobs.js";
import { HandleDir, PickedFiles, join } from "./local.js";
import { Pane, others } from "./pane.js";
import { Sweep } from "./sweep.js";
import { Transfers } from "./transfers.js";
import { retry as wtRetry, session as wtSession } from "./wt.js";

/** @type {Pane[]} */
let panes = [];
let active = 0;
/** @type {Transfers} */
let transfers;
/** @type {Jobs} */
let jobs;

function pane() {
  return panes[active];
}
function other() {
  return panes[1 - active];
}

/** @param {Pane} p */
function focus(p) {
  active = panes.indexOf(p);
  panes.forEach((x, i) => x.root.classList.toggle("active", i === active));
}

async function start() {
  try {
    const info = await api.session();
    showApp(info);
  } catch {
    showLogin();
  }
}

function showLogin() {
  byId("login-view").hidden = false;
  byId("app-view").hidden = true;
  byId("logout").hidden = true;
  /** @type {HTMLInputElement} */ (byId("token")).focus();
}

/** @param {api.SessionInfo} info */
function showApp(info) {
  byId("login-view").hidden = true;
  byId("app-view").hidden = false;
  byId("logout").hidden = false;
  byId("fingerprint").textContent = `certificate ${info.fingerprint}`;
  if (panes.length) return;
  // The module (hashes, the transfer machines) loaded now, not by the first transfer: over a
  // 100 ms path its 0.4 MiB took 0.4 s of a folder's first download.
  module().catch(() => {});
  const reload = () => panes.forEach((p) => p.load(p.path));
  transfers = new Transfers(reload);
  jobs = new Jobs(reload);
  byId("jobs-refresh").addEventListener("click", () => jobs.refresh());
  new Sweep();
  panes = [
    new Pane(byId("pane-0"), "local", focus, addServer),
    new Pane(byId("pane-1"), "server", focus, addServer),
  ];
  // Other servers this login added before (a reload keeps them), and their jobs.
  api.servers().then((answer) => {
    others.available = answer.available;
    others.list.splice(0, others.list.length, ...answer.servers);
    panes.forEach((p) => p.buildHead());
    if (answer.available) jobs.refresh();
  }, () => {});
  panes.forEach((p, i) => {
    p.load("");
    dropTarget(p, i);
  });
  focus(panes[1]);
  panes[1].list.focus();
  // Connects now, so the page says at once how transfers will go.
  wtSession();
  byId("transport-mode").addEventListener("change", () => {
    // "auto" measures afresh.
    transfers.chooser.reset();
    wtRetry();
  });
}

byId("login-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const field = /** @type {HTMLInputElement} */ (byId("token"));
  const error = byId("login-error");
  error.textContent = "";
  try {
    const info = await api.login(field.value);
    field.value = "";
    showApp(info);
  } catch (err) {
    error.textContent = /** @type {Error} */ (err).message;
  }
});

byId("logout").addEventListener("click", async () => {
  await api.logout().catch(() => {});
  location.reload();
});

/**
 * Asks for another server (address, fingerprint, token) and connects this server to it.
 * @returns {Promise<api.OtherServer | null>} the server, or null when the user gave up
 */
function addServer() {
  const dialog = /** @type {HTMLDialogElement} */ (byId("add-server"));
  const form = /** @type {HTMLFormElement} */ (byId("add-server-form"));
  const field = (/** @type {string} */ id) => /** @type {HTMLInputElement} */ (byId(id));
  const error = byId("add-server-error");
  error.textContent = "";
  form.reset();
  dialog.showModal();
  return new Promise((resolve) => {
    /** @param {SubmitEvent} e */
    const submit = async (e) => {
      const button = /** @type {HTMLButtonElement | null} */ (e.submitter);
      if (button?.value !== "connect") return;
      e.preventDefault();
      error.textContent = "Connecting…";
      try {
        const server = await api.addServer(field("add-server-address").value,
          field("add-server-fingerprint").value, field("add-server-token").value);
        field("add-server-token").value = "";
        others.list.push(server);
        panes.forEach((p) => p.buildHead());
        dialog.close();
        resolve(server);
        jobs.refresh();
      } catch (err) {
        error.textContent = /** @type {Error} */ (err).message;
      }
    };
    form.addEventListener("submit", submit);
    dialog.addEventListener("close", () => {
      form.removeEventListener("submit", submit);
      field("add-server-token").value = "";
      resolve(null);
    }, { once: true });
  });
}

/**
 * A copy from one server pane to the other: a job on the destination server. The overwrite
 * policy is the panel's; "ask" refuses files that exist (a job cannot stop to ask).
 * @param {Pane} from
 * @param {Pane} to
 * @param {{ name: string }[]} items
 */
async function copyBetween(from, to, items) {
  const policy = /** @type {HTMLSelectElement} */ (byId("policy")).value;
  const answer = await api.copyBetween({
    from: from.serverId() ?? "",
    to: to.serverId() ?? "",
    paths: items.map((i) => join(from.path, i.name)),
    dest: to.path,
    overwrite: policy || "refuse",
  });
  from.say(answer.done ? `copied: ${answer.done.files} files` : "copying: a job on the destination server (see Jobs)");
  await jobs.refresh();
  if (answer.done) await to.load(to.path);
}

/** F5: copies the active pane's selection into the other pane's folder. */
async function copy() {
  const from = pane();
  const to = other();
  const items = from.targets();
  if (!items.length) return;
  // An answer "for all" holds for this copy's files only.
  transfers.policyForAll = null;
  try {
    if (from.serverId() !== null && to.serverId() !== null) {
      await copyBetween(from, to, items);
    } else if (from.side === "remote" || to.side === "remote") {
      throw new Error("copies between this computer and another server go through this server: copy here first");
    } else if (from.side === "local" && to.side === "server") {
      if (!from.local) throw new Error("nothing on this computer is open");
      await uploadItems(from.local, from.path, items, to.path);
    } else if (from.side === "server" && to.side === "local") {
      await downloadItems(from.path, items, to);
    } else {
      throw new Error("copy goes between two panes of different sides");
    }
    from.selected.clear();
    from.render();
  } catch (e) {
    from.error(e);
  }
}

/**
 * Uploads `items` of the local folder `from` into the server's folder `to`: the folders are
 * walked here and made on the server (each level's at once), then every file is queued at once,
 * so a folder's small files share machine runs (batches.js).
 * @param {import("./local.js").Local} local
 * @param {string} from
 * @param {{ name: string, kind: string }[]} items
 * @param {string} to
 */
async function uploadItems(local, from, items, to) {
  /** @type {{ file: File, path: string }[]} */
  const files = [];
  /** @type {string[][]} the folders to make, by depth */
  const levels = [];
  /**
   * @param {string} src
   * @param {string} kind
   * @param {string} path beneath `to`
   * @param {number} depth
   */
  const walk = async (src, kind, path, depth) => {
    if (kind !== "dir") {
      files.push({ file: await local.file(src), path });
      return;
    }
    (levels[depth] ??= []).push(join(to, path));
    for (const entry of await local.list(src)) {
      await walk(join(src, entry.name), entry.kind, join(path, entry.name), depth + 1);
    }
  };
  for (const item of items) await walk(join(from, item.name), item.kind, item.name, 0);
  for (const level of levels) {
    await Promise.all(level.map((dir) => api.mkdir(dir).catch((e) => {
      if (e.code !== "exists") throw e;
    })));
  }
  queueUploads(files, to);
}

/** Copies queued so far (each copy's files share machine runs, not another's). */
let copies = 0;

/**
 * Queues the upload of `files` (each with its path beneath the server's folder `to`) as one copy.
 * @param {{ file: File, path: string }[]} files
 * @param {string} to
 */
function queueUploads(files, to) {
  const key = `up:${copies++}`;
  transfers.together(() => {
    for (const { file, path } of files) transfers.upload(file, join(to, path), { key, root: to, path, file });
  });
}

/**
 * Downloads `items` of the server's folder `from` into the local folder of `to`: a folder is
 * walked (each level's folders listed at once) and made here, then its files are queued at
 * once, so its small files share machine runs (batches.js).
 * @param {string} from
 * @param {{ kind: string, size: number, mtime: number, name: string }[]} items
 * @param {Pane} to
 */
async function downloadItems(from, items, to) {
  const local = to.local;
  for (const item of items) {
    const src = join(from, item.name);
    const dest = join(to.path, item.name);
    if (!(local instanceof HandleDir)) {
      if (item.kind === "dir") throw new Error("open a folder on this computer (or use the browser storage) to download folders");
      // No folder to write into: the browser's own download.
      const link = document.createElement("a");
      link.href = api.fileUrl(src);
      link.download = item.name;
      link.click();
      continue;
    }
    if (item.kind === "file") transfers.download(src, item.size, local, dest, item.mtime);
    if (item.kind !== "dir") continue;
    // Every level in one answer (what the download sends: the folder's own name first in
    // each path), then the folders here, each level's at once, each before those in it.
    const tree = await api.tree(src);
    /** @type {{ src: string, dest: string, path: string, size: number, mtime: number }[]} */
    const files = [];
    /** @type {string[][]} the folders to make, by depth */
    const levels = [];
    for (const e of tree.entries) {
      const inside = e.name.slice(e.name.indexOf("/") + 1);
      const c = { src: e.name.includes("/") ? join(src, inside) : src, dest: e.name.includes("/") ? join(dest, inside) : dest, path: e.name };
      if (e.kind === "dir") {
        const depth = e.name.split("/").length - 1;
        (levels[depth] ??= []).push(c.dest);
      } else if (e.kind === "file") files.push({ ...c, size: e.size, mtime: e.mtime });
    }
    for (const level of levels) await Promise.all((level ?? []).map((d) => local.dir(d, true)));
    const key = `down:${copies++}`;
    transfers.together(() => {
      for (const f of files) {
        const down = { local, dest: f.dest, mtime: f.mtime, whole: files.length };
        transfers.download(f.src, f.size, local, f.dest, f.mtime, { key, root: src, path: f.path, down });
      }
    });
  }
}

/**
 * Another server's pane is listed and copied to and from only: Sluice sessions carry no folder,
 * rename or delete requests.
 * @param {Pane} p
 */
function onlyCopies(p) {
  if (p.side !== "remote") return false;
  p.error("another server's pane lists and copies only: make folders, rename and delete there with its own page or tools");
  return true;
}

/** F7: a new folder in the active pane. */
async function makeFolder() {
  const p = pane();
  if (onlyCopies(p)) return;
  const answer = await ask("New folder name:", [{ value: "ok", label: "Create" }], "");
  if (!answer?.text) return;
  try {
    const path = join(p.path, answer.text);
    if (p.side === "server") await api.mkdir(path);
    else if (p.local) await p.local.mkdir(path);
    await p.load(p.path);
  } catch (e) {
    p.error(e);
  }
}

/** F8: deletes the selection (folders with everything in them). */
async function remove() {
  const p = pane();
  if (onlyCopies(p)) return;
  const items = p.targets();
  if (!items.length) return;
  const names = items.map((i) => i.name).join("\n");
  const where = p.side === "server" ? "on the server" : p.local instanceof PickedFiles ? "from the list" : "on this computer";
  const answer = await ask(`Delete ${items.length} ${where}?\n${names}`, [{ value: "ok", label: "Delete" }]);
  if (!answer) return;
  try {
    for (const item of items) {
      const path = join(p.path, item.name);
      if (p.side === "server") await api.remove(path);
      else if (p.local) await p.local.remove(path);
    }
  } catch (e) {
    p.error(e);
  }
  await p.load(p.path);
}

/** F2 or Shift+F6: renames the entry under the cursor. */
async function rename() {
  const p = pane();
  if (onlyCopies(p)) return;
  const entry = p.entries[p.cursor];
  if (!entry) return;
  const answer = await ask(`Rename "${entry.name}" to:`, [{ value: "ok", label: "Rename" }], entry.name);
  if (!answer?.text || answer.text === entry.name) return;
  try {
    const from = join(p.path, entry.name);
    const to = join(p.path, answer.text);
    if (p.side === "server") await api.rename(from, to);
    else if (p.local) await p.local.rename(from, to);
    await p.load(p.path);
  } catch (e) {
    p.error(e);
  }
}

document.addEventListener("keydown", (e) => {
  if (!panes.length || byId("app-view").hidden || /** @type {HTMLDialogElement} */ (byId("ask")).open) return;
  const target = /** @type {HTMLElement} */ (e.target);
  if (target.tagName === "INPUT" || target.tagName === "SELECT") return;
  const p = pane();
  const keys = {
    Tab: () => {
      focus(other());
      other().list.focus();
    },
    ArrowDown: () => p.move(1),
    ArrowUp: () => p.move(-1),
    PageDown: () => p.move(20),
    PageUp: () => p.move(-20),
    Home: () => p.move(-Infinity),
    End: () => p.move(Infinity),
    Enter: () => p.open(),
    Backspace: () => p.up(),
    " ": () => {
      const entry = p.entries[p.cursor];
      if (entry) p.toggle(entry.name);
      p.move(1);
    },
    Insert: () => keys[" "](),
    F5: () => copy(),
    F7: () => makeFolder(),
    F8: () => remove(),
    Delete: () => remove(),
    F2: () => rename(),
    F6: () => (e.shiftKey ? rename() : copy()),
  };
  const action = /** @type {Record<string, () => void>} */ (keys)[e.key];
  if (action) {
    e.preventDefault();
    action();
  }
});

/**
 * Rows dragged from the other pane copy into this one; files dropped from the desktop are
 * added to a local pane, or uploaded into a server pane's folder.
 * @param {Pane} p
 * @param {number} index
 */
function dropTarget(p, index) {
  p.root.addEventListener("dragover", (e) => {
    e.preventDefault();
    p.root.classList.add("drop");
  });
  p.root.addEventListener("dragleave", () => p.root.classList.remove("drop"));
  p.root.addEventListener("drop", (e) => {
    e.preventDefault();
    p.root.classList.remove("drop");
    const from = e.dataTransfer?.getData("application/x-sluice-pane");
    if (from && from !== p.root.id) {
      focus(panes[1 - index]);
      copy();
      return;
    }
    const files = e.dataTransfer?.files ? [...e.dataTransfer.files] : [];
    if (!files.length) return;
    if (p.side === "local") p.addPicked(files);
    else if (onlyCopies(p)) return;
    else queueUploads(files.map((file) => ({ file, path: file.name })), p.path);
  });
}

start();
