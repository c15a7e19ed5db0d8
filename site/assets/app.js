// The example site's script: proves that scripts load and run.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  var status = document.getElementById("status");
  status.textContent = "JavaScript ran: every asset of this page was served by Peregrine.";
  status.className = "ran";
});
