// "This computer": a folder the user opened (the File System Access API's
// showDirectoryPicker, or this browser's private storage, which has the same interface), or,
// where neither is usable, files picked or dropped (they can be sent, not received).

/** @typedef {{ name: string, kind: "file" | "dir", size: number, mtime: number }} LocalEntry */

/**
 * `a/b` and `c` joined: `a/b/c`.
 * @param {string} dir
 * @param {string} name
 */
export const join = (dir, name) => (dir ? `${dir}/${name}` : name);

/**
 * The folder holding `path`, and its last name.
 * @param {string} path
 * @returns {[string, string]}
 */
export function split(path) {
  const at = path.lastIndexOf("/");
  return at < 0 ? ["", path] : [path.slice(0, at), path.slice(at + 1)];
}

/** A folder of this computer, through its directory handle. */
export class HandleDir {
  /**
   * @param {FileSystemDirectoryHandle} root
   * @param {string} label what it is, for the pane's title
   */
  constructor(root, label) {
    this.root = root;
    this.label = label;
    this.canReceive = true;
  }

  /**
   * @param {string} path
   * @param {boolean} [create]
   * @returns {Promise<FileSystemDirectoryHandle>}
   */
  async dir(path, create = false) {
    let dir = this.root;
    for (const part of path.split("/").filter(Boolean)) {
      dir = await dir.getDirectoryHandle(part, { create });
    }
    return dir;
  }

  /**
   * @param {string} path
   * @returns {Promise<LocalEntry[]>}
   */
  async list(path) {
    const dir = await this.dir(path);
    /** @type {LocalEntry[]} */
    const entries = [];
    for await (const handle of /** @type {any} */ (dir).values()) {
      if (handle.kind === "file") {
        const file = await handle.getFile();
        entries.push({ name: handle.name, kind: "file", size: file.size, mtime: Math.floor(file.lastModified / 1000) });
      } else {
        entries.push({ name: handle.name, kind: "dir", size: 0, mtime: 0 });
      }
    }
    return entries;
  }

  /** @param {string} path */
  async file(path) {
    const [dir, name] = split(path);
    return (await (await this.dir(dir)).getFileHandle(name)).getFile();
  }

  /** @param {string} path */
  async mkdir(path) {
    const [dir, name] = split(path);
    await (await this.dir(dir)).getDirectoryHandle(name, { create: true });
  }

  /** @param {string} path */
  async remove(path) {
    const [dir, name] = split(path);
    await (await this.dir(dir)).removeEntry(name, { recursive: true });
  }

  /**
   * @param {string} from
   * @param {string} to a name in the same folder
   */
  async rename(from, to) {
    const [dir, name] = split(from);
    const parent = await this.dir(dir);
    const handle = await parent.getFileHandle(name).catch(() => parent.getDirectoryHandle(name));
    const move = /** @type {any} */ (handle).move;
    if (!move) throw new Error("this browser cannot rename here");
    await move.call(handle, split(to)[1]);
  }

  /**
   * What is at `path`, if anything.
   * @param {string} path
   * @returns {Promise<File | null>}
   */
  async existing(path) {
    return this.file(path).catch(() => null);
  }
}

/** Files picked or dropped, as a tree of their relative paths (read-only: a source only). */
export class PickedFiles {
  constructor() {
    /** @type {Map<string, File | null>} path to file (null: a folder) */
    this.items = new Map();
    this.label = "picked files";
    this.canReceive = false;
  }

  /**
   * Adds files, each under its relative path (a picked folder's) or its name.
   * @param {Iterable<File>} files
   */
  add(files) {
    for (const file of files) {
      const path = /** @type {any} */ (file).webkitRelativePath || file.name;
      const parts = path.split("/");
      for (let i = 1; i < parts.length; i += 1) this.items.set(parts.slice(0, i).join("/"), null);
      this.items.set(path, file);
    }
  }

  /**
   * @param {string} path
   * @returns {Promise<LocalEntry[]>}
   */
  async list(path) {
    /** @type {LocalEntry[]} */
    const entries = [];
    for (const [p, file] of this.items) {
      const [dir, name] = split(p);
      if (dir !== path) continue;
      entries.push(file
        ? { name, kind: "file", size: file.size, mtime: Math.floor(file.lastModified / 1000) }
        : { name, kind: "dir", size: 0, mtime: 0 });
    }
    return entries;
  }

  /** @param {string} path */
  async file(path) {
    const file = this.items.get(path);
    if (!file) throw new Error(`${path}: not a picked file`);
    return file;
  }

  /** @param {string} path */
  async mkdir(path) {
    this.items.set(path, null);
  }

  /** Removes from the list (the files on disk stay). @param {string} path */
  async remove(path) {
    for (const p of [...this.items.keys()]) if (p === path || p.startsWith(`${path}/`)) this.items.delete(p);
  }

  async rename() {
    throw new Error("picked files cannot be renamed");
  }

  /** @returns {Promise<File | null>} */
  async existing() {
    return null;
  }
}

/** @typedef {HandleDir | PickedFiles} Local */

/** Whether this browser lets a page open a folder of this computer. */
export const canOpenFolders = () => "showDirectoryPicker" in window;

/** @returns {Promise<HandleDir>} a folder the user chooses */
export async function openFolder() {
  const handle = await /** @type {any} */ (window).showDirectoryPicker({ mode: "readwrite" });
  return new HandleDir(handle, handle.name);
}

/** @returns {Promise<HandleDir>} this browser's private storage for this site */
export async function browserStorage() {
  return new HandleDir(await navigator.storage.getDirectory(), "browser storage");
}
