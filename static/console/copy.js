// Copy buttons: <button data-copy="<id>"> puts the text of the element with that id on the clipboard and says
// so on the button. A file rather than inline script: the console's Content-Security-Policy allows no inline JS.
(function () {
  function said(button, text) {
    // only the visible label changes: the button keeps its accessible name's hidden part
    const label = button.querySelector(".copy-label") || button;
    if (!label.dataset.label) label.dataset.label = label.textContent;
    label.textContent = text;
    const notice = document.getElementById("live-notice");
    if (notice) notice.textContent = text;
    setTimeout(function () { label.textContent = label.dataset.label; }, 2000);
  }
  function selectText(element) {
    const range = document.createRange();
    range.selectNodeContents(element);
    const selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
  }
  document.addEventListener("click", function (event) {
    const button = event.target.closest && event.target.closest("[data-copy]");
    const source = button && document.getElementById(button.dataset.copy);
    if (!source) return;
    const text = source.textContent;
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(
        function () { said(button, "Copied"); },
        function () { selectText(source); said(button, "Press Ctrl+C"); },
      );
    } else {
      // plain http (not localhost): no clipboard API; select the text for the user's own copy
      selectText(source);
      said(button, "Selected: press Ctrl+C");
    }
  });
})();
