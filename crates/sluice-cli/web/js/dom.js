// Building the page: every piece of text goes in with textContent (never as markup), so a file
// named `<img src=x onerror=alert(1)>` shows as those characters.

/**
 * An element with attributes, properties and children (strings become text nodes).
 * @template {keyof HTMLElementTagNameMap} K
 * @param {K} tag
 * @param {Record<string, string | boolean | number>} [props]
 * @param {...(Node | string)} children
 * @returns {HTMLElementTagNameMap[K]}
 */
export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key === "class") node.className = String(value);
    else if (typeof value === "boolean") node.toggleAttribute(key, value);
    else node.setAttribute(key, String(value));
  }
  for (const child of children) {
    node.append(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return node;
}

/**
 * Sets `node`'s text to `text` unless it is that already: an unchanged text is not written
 * again, so a panel redrawn often costs the browser no layout for what did not change.
 * @param {Node} node
 * @param {string} text
 */
export function setText(node, text) {
  if (node.textContent !== text) node.textContent = text;
}

/**
 * The element with `id`, or a thrown error naming it.
 * @param {string} id
 * @returns {HTMLElement}
 */
export function byId(id) {
  const node = document.getElementById(id);
  if (!node) throw new Error(`no #${id} in the page`);
  return node;
}

/**
 * Bytes as text: 1.5 MiB.
 * @param {number} n
 */
export function size(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i += 1;
  }
  return i === 0 ? `${n} B` : `${n.toFixed(1)} ${units[i]}`;
}

/**
 * Seconds since the epoch as a local date and time.
 * @param {number} secs
 */
export function time(secs) {
  if (!secs) return "";
  const d = new Date(secs * 1000);
  const pad = (/** @type {number} */ x) => String(x).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

/**
 * Seconds as text: 1:05.
 * @param {number} secs
 */
export function duration(secs) {
  if (!Number.isFinite(secs)) return "";
  const s = Math.max(0, Math.round(secs));
  return `${Math.floor(s / 60)}:${String(s % 60).padStart(2, "0")}`;
}

/**
 * Asks a question in the page's dialog: the button chosen (its value) and the text typed, or
 * null when it was dismissed.
 * @param {string} text
 * @param {{ value: string, label: string }[]} buttons
 * @param {string | null} [input] the input's first value; null for no input
 * @returns {Promise<{ choice: string, text: string } | null>}
 */
export function ask(text, buttons, input = null) {
  const dialog = /** @type {HTMLDialogElement} */ (byId("ask"));
  const field = /** @type {HTMLInputElement} */ (byId("ask-input"));
  byId("ask-text").textContent = text;
  field.hidden = input === null;
  field.value = input ?? "";
  const menu = byId("ask-buttons");
  menu.replaceChildren(
    ...buttons.map((b) => el("button", { value: b.value, "data-choice": b.value }, b.label)),
    el("button", { value: "", "data-choice": "cancel" }, "Cancel"),
  );
  dialog.returnValue = "";
  dialog.showModal();
  if (input !== null) {
    field.focus();
    field.select();
  }
  return new Promise((resolve) => {
    dialog.addEventListener(
      "close",
      () => resolve(dialog.returnValue ? { choice: dialog.returnValue, text: field.value } : null),
      { once: true },
    );
  });
}
