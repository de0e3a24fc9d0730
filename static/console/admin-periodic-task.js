// django-celery-beat's periodic task form: show the chosen crontab in words under the crontab field.
// (Its own template does this in an inline script, which the Content-Security-Policy refuses.)
(function () {
  const script = document.currentScript;
  const readable = JSON.parse(document.getElementById("readable-crontabs").textContent);
  const select = document.getElementById("id_crontab");
  const help = document.querySelector(".field-crontab .help");
  const translation = document.querySelector(".field-crontab_translation");
  if (translation) translation.style.display = "none";  // CSSOM, which the CSP allows (as jQuery's hide() does)
  if (!select || !help) return;
  select.addEventListener("change", function () {
    help.textContent = script.dataset.crontabHelp;
    const words = readable[select.value];
    if (words) {
      help.append(document.createElement("br"), "Translation: " + words);
    }
  });
})();
