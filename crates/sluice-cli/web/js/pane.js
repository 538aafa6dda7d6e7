// One pane of the file manager: a path on this server under the token's root, on another
// server the page added (this server lists it for the page), or on "this computer". It lists,
// sorts, moves a cursor and keeps a selection; what to do with them is main.js's.

import * as api from "./api.js";
import { el, size, time } from "./dom.js";
import { PickedFiles, browserStorage, canOpenFolders, join, openFolder, split } from "./local.js";

/** @typedef {{ name: string, kind: string, size: number, mtime: number }} Row */
/** @typedef {"server" | "local" | "remote"} Side */

/**
 * Other servers the panes may show, and whether this server offers them at all.
 * @type {{ available: boolean, list: api.OtherServer[] }}
 */
export const others = { available: false, list: [] };

export class Pane {
  /**
   * @param {HTMLElement} root the pane's section
   * @param {Side} side
   * @param {(pane: Pane) => void} onFocus
   * @param {() => Promise<api.OtherServer | null>} addServer asks for another server
   */
  constructor(root, side, onFocus, addServer) {
    this.root = root;
    /** @type {Side} */
    this.side = side;
    /** @type {api.OtherServer | null} the other server a "remote" pane shows */
    this.remote = null;
    this.addServer = addServer;
    /** @type {import("./local.js").Local | null} */
    this.local = null;
    this.path = "";
    /** @type {Row[]} */
    this.entries = [];
    /** @type {{ key: "name" | "size" | "mtime", desc: boolean }} */
    this.sort = { key: "name", desc: false };
    this.cursor = 0;
    /** What the pane drew last: its title and listing (`listed`). */
    this.shown = "";
    /** @type {Set<string>} */
    this.selected = new Set();
    this.onFocus = onFocus;
    this.status = el("div", { class: "status", role: "status" });
    this.list = el("div", { class: "list", tabindex: 0 });
    this.head = el("div", { class: "head" });
    root.replaceChildren(this.head, this.list, this.status);
    root.addEventListener("mousedown", () => this.onFocus(this));
    this.buildHead();
  }

  /** The pane's header: which side, the path, and the side's own buttons. */
  buildHead() {
    const which = el("select", { class: "side", "aria-label": "side" },
      el("option", { value: "server" }, "Server"),
      el("option", { value: "local" }, "This computer"),
      ...others.list.map((o) => el("option", { value: `remote:${o.id}` }, o.label)),
      ...(others.available ? [el("option", { value: "add" }, "Another server…")] : []));
    which.value = this.side === "remote" && this.remote ? `remote:${this.remote.id}` : this.side;
    which.addEventListener("change", async () => {
      if (which.value === "add") {
        const added = await this.addServer();
        if (!added) {
          this.buildHead();
          return;
        }
        this.show("remote", added);
        return;
      }
      const remote = others.list.find((o) => which.value === `remote:${o.id}`) ?? null;
      this.show(remote ? "remote" : /** @type {Side} */ (which.value), remote);
    });
    const path = el("input", { class: "path", "aria-label": "path", spellcheck: "false" });
    path.value = this.path;
    path.addEventListener("keydown", (e) => {
      if (e.key === "Enter") {
        e.preventDefault();
        this.load(path.value.replace(/^\/+|\/+$/g, ""));
        this.list.focus();
      }
      e.stopPropagation();
    });
    this.pathInput = path;
    const up = el("button", { class: "up", title: "Up (Backspace)" }, "Up");
    up.addEventListener("click", () => this.up());
    const refresh = el("button", { class: "refresh" }, "Refresh");
    refresh.addEventListener("click", () => this.load(this.path));
    const items = [which, up, path, refresh];
    if (this.side === "remote") {
      const forget = el("button", { class: "forget", title: "close this server's session here; its jobs go on" }, "Forget server");
      forget.addEventListener("click", () => this.forget());
      items.push(forget);
    }
    if (this.side === "local") {
      if (canOpenFolders()) {
        const open = el("button", { class: "open-folder" }, "Open folder…");
        open.addEventListener("click", () => openFolder().then((d) => this.useLocal(d), (e) => this.error(e)));
        items.push(open);
      }
      const storage = el("button", { class: "browser-storage", title: "a folder in this browser's private storage" }, "Browser storage");
      storage.addEventListener("click", () => browserStorage().then((d) => this.useLocal(d), (e) => this.error(e)));
      const files = el("input", { type: "file", multiple: true, class: "pick-files", hidden: true });
      const folder = el("input", { type: "file", multiple: true, webkitdirectory: true, class: "pick-folder", hidden: true });
      const pickFiles = el("button", {}, "Pick files…");
      const pickFolder = el("button", {}, "Pick folder…");
      pickFiles.addEventListener("click", () => files.click());
      pickFolder.addEventListener("click", () => folder.click());
      for (const input of [files, folder]) {
        input.addEventListener("change", () => {
          this.addPicked(input.files ? [...input.files] : []);
          input.value = "";
        });
      }
      items.push(storage, pickFiles, pickFolder, files, folder);
    }
    this.head.replaceChildren(...items);
  }

  /**
   * Shows `side` (for "remote", the server `remote`) from its top.
   * @param {Side} side
   * @param {api.OtherServer | null} [remote]
   */
  show(side, remote = null) {
    this.side = side;
    this.remote = side === "remote" ? remote : null;
    this.path = "";
    this.buildHead();
    this.load("");
  }

  /** Forgets the other server this pane shows (its session here ends; its jobs go on). */
  async forget() {
    const remote = this.remote;
    if (!remote) return;
    try {
      await api.forgetServer(remote.id);
    } catch (e) {
      this.error(e);
      return;
    }
    const at = others.list.findIndex((o) => o.id === remote.id);
    if (at >= 0) others.list.splice(at, 1);
    this.show("server");
  }

  /** The server id a server pane names in copies between servers ("" this one); null for this computer. */
  serverId() {
    if (this.side === "server") return "";
    return this.side === "remote" && this.remote ? this.remote.id : null;
  }

  /** @param {import("./local.js").Local} local */
  useLocal(local) {
    this.local = local;
    this.load("");
  }

  /** @param {File[]} files */
  addPicked(files) {
    if (!(this.local instanceof PickedFiles)) this.local = new PickedFiles();
    this.local.add(files);
    this.load(this.path);
  }

  title() {
    if (this.side === "server") return `server:/${this.path}`;
    if (this.side === "remote") return `${this.remote?.label ?? "server"}:/${this.path}`;
    return `${this.local?.label ?? "this computer"}:/${this.path}`;
  }

  /** @param {unknown} e */
  error(e) {
    const err = /** @type {any} */ (e);
    this.status.className = "status error";
    this.status.textContent = err?.message ?? String(err);
  }

  /** @param {string} text */
  say(text) {
    this.status.className = "status";
    this.status.textContent = text;
  }

  /**
   * Lists `path`; on failure the pane keeps what it showed and says why.
   * @param {string} path
   */
  async load(path) {
    // The view follows the cursor when a folder opens or the cursor's entry changes; a reload
    // that keeps both leaves the view where the user left it.
    let scroll = false;
    try {
      /** @type {Row[]} */
      let entries;
      if (this.side === "server") {
        entries = (await api.list(path)).entries;
      } else if (this.side === "remote") {
        if (!this.remote) throw new Error("no server chosen");
        entries = (await api.serverList(this.remote.id, path)).entries;
      } else if (this.local) {
        entries = await this.local.list(path);
      } else {
        entries = [];
        this.say("Open a folder, use the browser's storage, or pick or drop files.");
      }
      if (this.side !== "local" || this.local) this.say(`${entries.length} entries`);
      // A reload that finds what the pane shows (a transfer into another folder ended): nothing
      // to draw again (a folder of 200 files ending one by one redrew both panes 200 times).
      if (this.path === path && this.shown === this.title() + listed(entries)) return;
      const before = this.entries[this.cursor]?.name;
      const keep = this.path === path ? before : split(this.path)[1];
      scroll = this.path !== path;
      this.path = path;
      this.entries = entries;
      this.shown = this.title() + listed(entries);
      this.selected = new Set([...this.selected].filter((n) => entries.some((e) => e.name === n)));
      this.sortEntries();
      const at = this.entries.findIndex((e) => e.name === keep);
      this.cursor = Math.max(0, at);
      scroll ||= this.entries[this.cursor]?.name !== before;
    } catch (e) {
      this.error(e);
    }
    if (this.pathInput) this.pathInput.value = this.path;
    this.render(scroll);
  }

  sortEntries() {
    const { key, desc } = this.sort;
    const sign = desc ? -1 : 1;
    this.entries.sort((a, b) => {
      if ((a.kind === "dir") !== (b.kind === "dir")) return a.kind === "dir" ? -1 : 1;
      const d = key === "name" ? a.name.localeCompare(b.name) : a[key] - b[key];
      return sign * (d || a.name.localeCompare(b.name));
    });
  }

  /** @param {"name" | "size" | "mtime"} key */
  sortBy(key) {
    this.sort = { key, desc: this.sort.key === key ? !this.sort.desc : false };
    const name = this.entries[this.cursor]?.name;
    this.sortEntries();
    this.cursor = Math.max(0, this.entries.findIndex((e) => e.name === name));
    this.render();
  }

  /** @param {boolean} [scroll] whether the view goes to the cursor's row */
  render(scroll = true) {
    const arrow = (/** @type {string} */ k) => (this.sort.key === k ? (this.sort.desc ? " ▼" : " ▲") : "");
    const th = (/** @type {"name" | "size" | "mtime"} */ k, /** @type {string} */ label) => {
      const cell = el("th", { "data-sort": k }, label + arrow(k));
      cell.addEventListener("click", () => this.sortBy(k));
      return cell;
    };
    const rows = this.entries.map((entry, i) => {
      const classes = [entry.kind === "dir" ? "dir" : "file"];
      if (i === this.cursor) classes.push("cursor");
      if (this.selected.has(entry.name)) classes.push("selected");
      const row = el("tr", { class: classes.join(" "), draggable: "true" },
        el("td", { class: "name" }, entry.name),
        el("td", { class: "size" }, entry.kind === "dir" ? "<dir>" : size(entry.size)),
        el("td", { class: "mtime" }, time(entry.mtime)));
      row.addEventListener("click", (e) => {
        this.cursor = i;
        if (e.ctrlKey || e.metaKey) this.toggle(entry.name);
        this.render();
      });
      row.addEventListener("dblclick", () => this.open());
      row.addEventListener("dragstart", (e) => {
        this.cursor = i;
        e.dataTransfer?.setData("application/x-sluice-pane", this.root.id);
      });
      return row;
    });
    const table = el("table", {},
      el("thead", {}, el("tr", {}, th("name", "Name"), th("size", "Size"), th("mtime", "Modified"))),
      el("tbody", {}, ...rows));
    this.list.replaceChildren(table);
    this.root.setAttribute("aria-label", this.title());
    if (scroll) rows[this.cursor]?.scrollIntoView({ block: "nearest" });
  }

  /** @param {string} name */
  toggle(name) {
    if (this.selected.has(name)) this.selected.delete(name);
    else this.selected.add(name);
  }

  /** @param {number} delta */
  move(delta) {
    this.cursor = Math.min(Math.max(0, this.cursor + delta), this.entries.length - 1);
    this.render();
  }

  /** Opens the folder under the cursor. */
  open() {
    const entry = this.entries[this.cursor];
    if (entry?.kind === "dir") this.load(join(this.path, entry.name));
  }

  up() {
    if (this.path) this.load(split(this.path)[0]);
  }

  /** @returns {Row[]} the selection, or else the entry under the cursor */
  targets() {
    const chosen = this.entries.filter((e) => this.selected.has(e.name));
    const current = this.entries[this.cursor];
    return chosen.length ? chosen : current ? [current] : [];
  }
}

/**
 * A listing's entries as one string (name, kind, size and time of each), to tell a reload that
 * found the same from one that did not.
 * @param {Row[]} entries
 */
function listed(entries) {
  return JSON.stringify(entries.map((e) => [e.name, e.kind, e.size, e.mtime]));
}
