// Accessibility of the page shell and of htmx updates: the collapsing menu, the one live notice, and focus
// that stays where the operator was when a region is swapped. Static file: the CSP allows no inline script.

// The header's "Menu" button folds the links away on narrow screens. Without JavaScript the links show.
(function () {
  function setOpen(toggle, panel, open) {
    toggle.setAttribute("aria-expanded", String(open));
    panel.classList.toggle("is-open", open);
  }
  document.addEventListener("DOMContentLoaded", function () {
    const toggle = document.querySelector(".nav-toggle");
    const panel = toggle && document.getElementById(toggle.getAttribute("aria-controls"));
    if (!panel) return;
    toggle.closest(".topbar").classList.add("nav-collapsible");
    toggle.addEventListener("click", function () {
      setOpen(toggle, panel, toggle.getAttribute("aria-expanded") !== "true");
    });
    panel.addEventListener("keydown", function (event) {
      if (event.key !== "Escape" || toggle.getAttribute("aria-expanded") !== "true") return;
      setOpen(toggle, panel, false);
      toggle.focus();
    });
  });
})();

// The live notice (#live-notice, role=status) shows and announces what an htmx action did. Views send
// it as an HX-Trigger event: {"notice": {"text": "…", "level": "success"|"error"}}.
(function () {
  const SHOWN_MS = 10000;
  let timer = null;
  function show(text, level) {
    const region = document.getElementById("live-notice");
    if (!region || !text) return;
    region.textContent = "";  // an identical text twice in a row is announced twice
    region.classList.toggle("is-error", level === "error");
    window.setTimeout(function () { region.textContent = text; }, 30);
    window.clearTimeout(timer);
    timer = window.setTimeout(function () { region.textContent = ""; }, SHOWN_MS);
  }
  document.addEventListener("notice", function (event) {
    const detail = event.detail || {};
    show(detail.text || detail.value, detail.level);
  });
})();

// Focus survives a swap. htmx focuses an [autofocus] element of the new content (action responses mark
// the updated control) or the element with the focused one's id; when neither applies, focus would fall
// to <body> (a polling overview would steal it every 30 s). Then the same link or button of the new
// content gets it back, found by rel (a pager's Next), href or text, else the swapped region; the page never
// scrolls for it.
(function () {
  let kept = null;
  function describe(element) {
    return {
      rel: element.getAttribute("rel"),
      href: element.getAttribute("href"),
      name: element.getAttribute("name"),
      text: (element.textContent || "").trim(),
      tag: element.tagName,
    };
  }
  function same(element, wanted) {
    if (element.tagName !== wanted.tag) return false;
    if (wanted.rel) return element.getAttribute("rel") === wanted.rel;  // a pager's Next leads elsewhere each page
    if (wanted.href) return element.getAttribute("href") === wanted.href;
    if (wanted.name) return element.getAttribute("name") === wanted.name;
    return (element.textContent || "").trim() === wanted.text;
  }
  document.addEventListener("htmx:beforeSwap", function (event) {
    const target = event.detail.target;
    const active = document.activeElement;
    kept = null;
    if (!target || !target.id || !active || active === document.body || !target.contains(active)) return;
    kept = { region: target.id, wanted: describe(active), index: 0 };
    const peers = Array.from(target.querySelectorAll(active.tagName)).filter((el) => same(el, kept.wanted));
    kept.index = Math.max(0, peers.indexOf(active));
  });
  document.addEventListener("htmx:afterSettle", function () {
    const memo = kept;
    kept = null;
    const active = document.activeElement;
    if (!memo || (active && active !== document.body && active.isConnected)) return;
    const region = document.getElementById(memo.region);
    if (!region) return;
    const peers = Array.from(region.querySelectorAll(memo.wanted.tag)).filter((el) => same(el, memo.wanted));
    const element = peers[Math.min(memo.index, peers.length - 1)];
    if (element) {
      element.focus({ preventScroll: true });
      return;
    }
    if (!region.hasAttribute("tabindex")) region.setAttribute("tabindex", "-1");
    region.focus({ preventScroll: true });
  });
})();

// Code blocks and wide tables that scroll inside themselves (on a phone, mostly) take keyboard focus, so
// they can be scrolled without a mouse (WCAG 2.1.1); those that fit stay out of the Tab order.
(function () {
  function reachable(root) {
    (root || document).querySelectorAll("pre, .table-wrap").forEach(function (box) {
      const scrolls = box.scrollWidth > box.clientWidth + 1 || box.scrollHeight > box.clientHeight + 1;
      if (scrolls && !box.hasAttribute("tabindex")) {
        box.setAttribute("tabindex", "0");
        box.dataset.scrollFocus = "";  // ours to take back once it fits again
      } else if (!scrolls && "scrollFocus" in box.dataset) {
        box.removeAttribute("tabindex");
        delete box.dataset.scrollFocus;
      }
    });
  }
  let pending = null;
  document.addEventListener("DOMContentLoaded", function () { reachable(); });
  document.addEventListener("htmx:afterSettle", function () { reachable(); });
  document.addEventListener("toggle", function () { reachable(); }, true);  // a <details> opened a code block
  window.addEventListener("resize", function () {
    window.clearTimeout(pending);
    pending = window.setTimeout(reachable, 200);
  });
})();
