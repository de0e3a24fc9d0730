// The timeline's row actions: a page holds one <template id="row-menu">, copied into a row's menu when it opens
// (or when `c` asks for its compare link) and filled from the row's data-* attributes, instead of every row
// carrying its own links and pin form. Subgraph rows offer no restore or fork, as on their own page, and the head
// offers no restore (it would discard nothing).
function fillRowMenu(menu) {
  const template = document.getElementById("row-menu");
  if (!template || menu.querySelector(".row-menu-items")) return;
  const items = document.createElement("div");
  items.className = "row-menu-items";
  const data = menu.dataset;
  const url = template.dataset.checkpoint.replace("/0/", `/${data.id}/`);
  const copy = template.content.cloneNode(true);
  copy.querySelectorAll("[data-seq]").forEach((el) => { el.textContent = data.seq; });
  const compare = copy.querySelector("a[data-compare]");
  if (data.previous) compare.href = `${compare.getAttribute("href")}?a=${data.previous}&b=${data.id}`;
  else compare.remove();
  copy.querySelectorAll("[data-action]").forEach((el) => {
    if (el.tagName === "A" && "subgraph" in data) el.remove();
    else if (el.dataset.action === "restore/" && "head" in data) el.remove();
    else el.setAttribute(el.tagName === "FORM" ? "action" : "href", url + el.dataset.action);
  });
  const pin = copy.querySelector("form[data-action]");
  if (pin) {
    const pinned = "pinned" in data;
    pin.elements.pinned.value = pinned ? "0" : "1";
    pin.elements.next.value = `${location.pathname}${location.search}#cp-${data.seq}`;
    pin.querySelector("[data-pin]").textContent = pinned ? "Unpin" : "Pin";
  }
  items.append(copy);
  menu.append(items);
}
document.addEventListener("toggle", function (event) {
  const menu = event.target;
  if (menu.open && menu.matches && menu.matches("details.row-menu")) fillRowMenu(menu);
}, true);

// The state tree: a branch (or long text) whose entries are not on the page holds one link to them; opening the
// branch loads them in its place, once. One listener instead of htmx attributes repeating the URL on every branch.
document.addEventListener("toggle", function (event) {
  const branch = event.target;
  if (!branch.open || !branch.matches || !branch.matches(".tree details") || !window.htmx) return;
  const lazy = branch.querySelector(":scope > ul > li.lazy, :scope > .lazy-text");
  const link = lazy && lazy.querySelector(":scope > a");
  if (!link || lazy.dataset.loading) return;
  lazy.dataset.loading = "";
  const list = lazy.tagName === "LI";
  htmx.ajax("GET", link.getAttribute("href"), { source: branch, target: lazy, swap: list ? "outerHTML" : "innerHTML" });
}, true);

// A preview cut short by its width shows its whole text as a tooltip (set when the pointer or focus reaches it,
// so a page does not carry every preview twice).
document.addEventListener("pointerover", function (event) {
  const preview = event.target.closest && event.target.closest(".timeline .preview");
  if (preview && !preview.title && (preview.scrollWidth > preview.clientWidth + 1 || preview.scrollHeight > preview.clientHeight + 1)) preview.title = preview.textContent;
});

// Keyboard navigation for lists and timelines marked with data-keynav:
// j / k move between [data-keynav-item] rows, Enter opens the row's link, c compares with the previous row.
// The keys act only while focus is inside that list (WCAG 2.1.4): elsewhere j, k and c are just letters.
(function () {
  function scope(target) { return target && target.closest ? target.closest("[data-keynav]") : null; }
  function items(list) { return Array.from(list.querySelectorAll("[data-keynav-item]")); }
  function current(list) { return list.findIndex((el) => el.classList.contains("is-selected")); }
  function select(list, index) {
    list.forEach((el) => el.classList.remove("is-selected"));
    const el = list[Math.max(0, Math.min(index, list.length - 1))];
    if (!el) return;
    el.classList.add("is-selected");
    const focusable = el.querySelector("a");
    (focusable || el).focus({ preventScroll: false });
  }
  document.addEventListener("keydown", function (event) {
    const target = event.target;
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    if (target && (target.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(target.tagName))) return;
    const within = scope(target);
    if (!within) return;
    const list = items(within);
    if (!list.length) return;
    const at = current(list);
    if (event.key === "j") { select(list, at + 1); event.preventDefault(); }
    else if (event.key === "k") { select(list, at < 0 ? 0 : at - 1); event.preventDefault(); }
    else if (event.key === "Enter" && at >= 0 && !(target.closest && target.closest("a, button"))) {
      const link = list[at].querySelector("a[data-open]") || list[at].querySelector("a");
      if (link) { link.click(); event.preventDefault(); }
    } else if (event.key === "c" && at >= 0) {
      const menu = list[at].querySelector("details.row-menu");
      if (menu) fillRowMenu(menu);
      const link = list[at].querySelector("a[data-compare]");
      if (link) { link.click(); event.preventDefault(); }
    }
  });
  document.addEventListener("focusin", function (event) {
    const row = event.target.closest && event.target.closest("[data-keynav-item]");
    if (!row) return;
    items(scope(row) || document).forEach((el) => el.classList.toggle("is-selected", el === row));
  });
})();

// Dialogs opened by htmx (the restore preview): [data-close="<id>"] links and Escape inside a
// [data-close-on-escape] element remove the dialog; without JavaScript the links go back to the page.
(function () {
  document.addEventListener("click", function (event) {
    const link = event.target.closest && event.target.closest("[data-close]");
    const dialog = link && document.getElementById(link.dataset.close);
    if (!dialog) return;
    event.preventDefault();
    dialog.remove();
  });
  document.addEventListener("keydown", function (event) {
    if (event.key !== "Escape") return;
    const dialog = event.target.closest && event.target.closest("[data-close-on-escape]");
    if (dialog) dialog.remove();
  });
})();

// A failed htmx request never fails silently (whatever the page): an error answer (4xx, 5xx) or a
// request that never reached the server becomes a notice in a fixed corner, saying what went wrong.
(function () {
  function region() {
    let box = document.getElementById("request-errors");
    if (!box) {
      box = document.createElement("div");
      box.id = "request-errors";
      box.className = "toasts";
      document.body.append(box);
    }
    return box;
  }
  function notify(text) {
    const notice = document.createElement("div");
    notice.className = "notice notice-error";
    notice.setAttribute("role", "alert");
    const message = document.createElement("span");
    message.textContent = text;
    const dismiss = document.createElement("button");
    dismiss.type = "button";
    dismiss.className = "btn btn-small btn-quiet";
    dismiss.textContent = "Dismiss";
    dismiss.addEventListener("click", () => notice.remove());
    notice.append(message, dismiss);
    const box = region();
    box.replaceChildren(notice); // the latest failure only
  }
  function explain(xhr) {
    // the server's own words: an error notice in its answer, else its page's heading and first paragraph
    const page = new DOMParser().parseFromString(xhr.responseText || "", "text/html");
    const notice = page.querySelector(".notice-error");
    if (notice) return notice.textContent.trim();
    const heading = page.querySelector("main h1");
    const detail = page.querySelector("main p");
    return [heading, detail].filter(Boolean).map((el) => el.textContent.trim()).join(": ");
  }
  document.addEventListener("htmx:responseError", function (event) {
    const xhr = event.detail.xhr;
    const said = explain(xhr);
    notify(`That did not work (${xhr.status}${xhr.statusText ? " " + xhr.statusText : ""})${said ? ": " + said : "."}`);
  });
  document.addEventListener("htmx:sendError", function () {
    notify("The console did not answer: check the connection, then try again.");
  });
})();

// The alert list's reason fields belong to the page's one triage form, whose first button is disabled: Enter in a
// reason presses its own row's Resolve instead of the form's first button.
document.addEventListener("keydown", function (event) {
  const input = event.target;
  if (event.key !== "Enter" || !input.matches || !input.matches(".resolve-form input[type=text]")) return;
  const button = input.closest(".resolve-form").querySelector("button[formaction]");
  if (button) { event.preventDefault(); button.click(); }
});
