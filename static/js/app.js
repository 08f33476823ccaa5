/* Console behaviour: toasts, confirm dialogs, the chain editor. No inline script anywhere (strict CSP). */
(function () {
  "use strict";

  /* ---------- Toasts ---------- */

  const TOAST_MS = 6000;

  function toastRegion() {
    return document.getElementById("toasts");
  }

  function dismiss(toast) {
    toast.classList.add("leaving");
    window.setTimeout(function () { toast.remove(); }, 300);
  }

  // An error stays until dismissed; any other toast leaves after TOAST_MS, but not while hovered or focused.
  function armToast(toast) {
    if (toast.dataset.armed) return;
    toast.dataset.armed = "1";
    const close = toast.querySelector("[data-toast-close]");
    if (close) close.addEventListener("click", function () { dismiss(toast); });
    if (toast.classList.contains("toast-error")) return;
    let timer = 0;
    const start = function () {
      window.clearTimeout(timer);
      timer = window.setTimeout(function () { dismiss(toast); }, TOAST_MS);
    };
    const pause = function () { window.clearTimeout(timer); };
    toast.addEventListener("mouseenter", pause);
    toast.addEventListener("focusin", pause);
    toast.addEventListener("mouseleave", function () { if (!toast.contains(document.activeElement)) start(); });
    toast.addEventListener("focusout", function (event) { if (!toast.contains(event.relatedTarget) && !toast.matches(":hover")) start(); });
    start();
  }

  function showToast(message, level) {
    const region = toastRegion();
    if (!region) return;
    const toast = document.createElement("div");
    toast.className = "toast toast-" + (level || "info");
    const text = document.createElement("span");
    text.textContent = message;
    const close = document.createElement("button");
    close.type = "button";
    close.setAttribute("data-toast-close", "");
    close.setAttribute("aria-label", "Dismiss");
    close.textContent = "×";
    toast.append(text, close);
    region.append(toast);
    armToast(toast);
  }

  // Django messages travel in HX-Trigger: {"messages": [{"message", "level"}]}.
  document.addEventListener("messages", function (event) {
    const detail = event.detail || {};
    const items = Array.isArray(detail) ? detail : detail.value || [];
    items.forEach(function (m) { showToast(m.message, m.level); });
  });

  document.addEventListener("htmx:responseError", function (event) {
    const status = event.detail.xhr ? event.detail.xhr.status : 0;
    const text = status === 403 ? "Your role does not allow this action."
      : status === 404 ? "That item no longer exists."
      : status === 409 ? "Someone else changed this item; reload to see the current state."
      : "The request failed (" + status + "). Try again.";
    showToast(text, "error");
    const verb = event.detail.requestConfig ? String(event.detail.requestConfig.verb).toLowerCase() : "get";
    if (status === 404 && verb !== "get") forgetStale(event.detail.target);
  });

  // A change to an item that is gone (deleted elsewhere): its row is removed; a region is fetched again.
  function forgetStale(target) {
    if (!target || !target.isConnected || target.closest("dialog")) return;
    if (target.matches("tr")) {
      const region = target.closest("[id]:not(tr)") || document.getElementById("main");
      target.remove();
      if (!document.activeElement || document.activeElement === document.body) {
        if (!region.hasAttribute("tabindex")) region.setAttribute("tabindex", "-1");
        region.focus({ preventScroll: true });
      }
    } else if (target.id && window.htmx && target.closest("#main")) {
      window.htmx.ajax("GET", location.href, { target: "#" + target.id, swap: "outerHTML" });
    }
  }

  document.addEventListener("htmx:sendError", function () {
    showToast("The server could not be reached.", "error");
  });

  /* ---------- Dialogs ---------- */

  // A [data-dialog-open="id"] link opens the <dialog id=...>; without JS the link
  // goes to a confirm page instead. Escape closes (native); focus returns to the opener.
  document.addEventListener("click", function (event) {
    const opener = event.target.closest("[data-dialog-open]");
    if (opener) {
      const dialog = document.getElementById(opener.dataset.dialogOpen);
      if (dialog && typeof dialog.showModal === "function") {
        event.preventDefault();
        dialog._opener = opener;
        dialog.showModal();
      }
      return;
    }
    const closer = event.target.closest("[data-dialog-close]");
    if (closer) {
      const dialog = closer.closest("dialog");
      if (dialog) {
        event.preventDefault();
        dialog.close();
      }
    }
  });

  document.addEventListener("close", function (event) {
    const dialog = event.target;
    if (!(dialog instanceof HTMLDialogElement)) return;
    const opener = dialog._opener;
    if (opener && opener.isConnected) {
      opener.focus();
    } else {
      const fallback = document.querySelector("[data-focus-after-dialog]") || document.querySelector("main h1");
      if (fallback) {
        if (!fallback.hasAttribute("tabindex")) fallback.setAttribute("tabindex", "-1");
        fallback.focus();
      }
    }
  }, true);

  // A form inside a dialog that posts over HTMX closes its dialog once answered.
  document.addEventListener("htmx:afterRequest", function (event) {
    const dialog = event.target.closest && event.target.closest("dialog");
    if (dialog && dialog.open) dialog.close();
  });

  /* ---------- Chain editor ---------- */

  /*
   * One ordered queue for the editor's refreshes (cost hints, warnings, the Resilience timeline).
   *
   * Why: a refresh answer replaces the whole form. If it answered after an edit made while it was in
   * flight (a move, a drag, a remove, another select), that edit was undone, and saved that way.
   * So every change in the form goes through refreshQueue():
   *   - reorders, removes and adds happen in the DOM at once; every change (those, the selects, the
   *     Resilience checkbox, Update preview) bumps a change counter and asks for a refresh;
   *   - at most one request per editor is in flight; a change while one is out waits for it;
   *   - an answer is swapped in only if nothing changed since its request was built (and no drag is
   *     under way); a stale answer is dropped and the current DOM is posted again, so the latest state
   *     always wins and no edit is ever lost;
   *   - a Save in the modal waits in the same queue, after the refresh in flight.
   * With one request out at a time, two answers can never race into the same (or an already replaced)
   * form, so hx-preserve inputs (Name, Enabled, the Resilience knobs) always survive a swap.
   * Other elements of the form that carry their own hx-post (the Resilience step) are routed here too.
   */

  const ENTRY_NAME = /^entries-\d+-/;
  const ENTRY_ID = /^id_entries-\d+-/;
  const EDITOR = "#chain-form";

  function entryRows(list) {
    return Array.from(list.querySelectorAll(":scope > .entry"));
  }

  // Field names carry the position (entries-0-model ...), so the posted order is the visible order.
  function renumber(list) {
    const rows = entryRows(list);
    rows.forEach(function (row, i) {
      row.querySelectorAll("[name]").forEach(function (el) {
        el.name = el.name.replace(ENTRY_NAME, "entries-" + i + "-");
      });
      row.querySelectorAll("[id]").forEach(function (el) {
        el.id = el.id.replace(ENTRY_ID, "id_entries-" + i + "-");
      });
      row.querySelectorAll("label[for]").forEach(function (el) {
        el.htmlFor = el.htmlFor.replace(ENTRY_ID, "id_entries-" + i + "-");
      });
      row.querySelectorAll("[aria-describedby]").forEach(function (el) {
        el.setAttribute("aria-describedby", el.getAttribute("aria-describedby").replace(ENTRY_ID, "id_entries-" + i + "-"));
      });
      const pos = row.querySelector(".entry-pos");
      if (pos) pos.textContent = String(i + 1) + ".";
      row.querySelectorAll("[data-entry-move]").forEach(function (btn) {
        const up = btn.dataset.entryMove === "up";
        btn.value = btn.dataset.entryMove + ":" + i;
        btn.disabled = up ? i === 0 : i === rows.length - 1;
        btn.setAttribute("aria-label", "Move entry " + (i + 1) + (up ? " up" : " down"));
      });
      const remove = row.querySelector("[data-entry-remove]");
      if (remove) {
        remove.value = "remove:" + i;
        remove.setAttribute("aria-label", "Remove entry " + (i + 1));
      }
    });
    const form = list.closest("form");
    const add = form && form.querySelector("[data-entry-add]");
    if (add) add.disabled = rows.length >= Number(list.dataset.max || 10);
  }

  function announce(list, text) {
    const status = list.closest("form").querySelector("[data-entry-status]");
    if (status) status.textContent = text;
  }

  // The queue's state lives on the form's parent, which an outerHTML swap of the form keeps.
  function queueFor(form) {
    const host = form.parentNode;
    if (!host._chainQueue) {
      host._chainQueue = { host: host, changes: 0, sent: 0, inFlight: null, saveWanted: false, dragging: false };
    }
    return host._chainQueue;
  }

  function currentForm(queue) {
    return queue.host.querySelector(EDITOR);
  }

  function markBusy(queue) {
    const form = currentForm(queue);
    if (!form) return;
    const busy = Boolean(queue.inFlight) || queue.saveWanted || queue.changes !== queue.sent;
    if (busy) form.setAttribute("aria-busy", "true");
    else form.removeAttribute("aria-busy");
  }

  let issuing = false; // our own htmx.ajax call is running: its htmx:confirm must pass

  function send(queue, kind) {
    const form = currentForm(queue);
    if (!form || !window.htmx) return;
    queue.inFlight = kind;
    queue.sent = queue.changes;
    if (kind === "save") {
      queue.saveWanted = false;
      form.inert = true; // nothing typed during the save can be lost to its answer
    }
    markBusy(queue);
    issuing = true;
    let request;
    try {
      request = window.htmx.ajax("POST", form.getAttribute("action"), {
        source: form,
        target: form,
        swap: "outerHTML",
        values: { op: kind },
      });
    } finally {
      issuing = false;
    }
    const done = function () { answered(queue); };
    if (request && request.then) request.then(done, done);
    else done();
  }

  function answered(queue) {
    queue.inFlight = null;
    const form = currentForm(queue);
    if (form) form.inert = false;
    pump(queue);
  }

  // Send what is waiting: a Save first (it posts the current DOM, so it covers every change), else a refresh.
  function pump(queue) {
    if (queue.dead) return;
    if (!queue.inFlight && !queue.dragging && currentForm(queue)) {
      if (queue.saveWanted) send(queue, "save");
      else if (queue.changes !== queue.sent) send(queue, "refresh");
    }
    markBusy(queue);
  }

  function refreshQueue(form) {
    const queue = queueFor(form);
    queue.changes += 1;
    pump(queue);
  }

  // Only the answer to the latest state may replace the form.
  document.addEventListener("htmx:beforeSwap", function (event) {
    const target = event.detail.target;
    if (!target || !target.matches || !target.matches(EDITOR)) return;
    const queue = queueFor(target);
    if (queue.inFlight === "refresh" && (queue.changes !== queue.sent || queue.dragging)) {
      event.detail.shouldSwap = false;
    }
  });

  // Elements with their own hx-post inside the editor (the Resilience checkbox, Update preview) join the queue.
  document.addEventListener("htmx:confirm", function (event) {
    if (issuing) return;
    const form = event.target.closest && event.target.closest(EDITOR);
    if (!form || String(event.detail.verb).toLowerCase() !== "post") return;
    event.preventDefault();
    refreshQueue(form);
  });

  document.addEventListener("change", function (event) {
    const el = event.target;
    if (el.matches && el.matches("[data-refresh]") && el.closest(EDITOR)) refreshQueue(el.closest(EDITOR));
  });

  // In the modal the form saves over HTMX, through the queue (the full page keeps its plain post).
  document.addEventListener("submit", function (event) {
    const form = event.target;
    if (!form.matches || !form.matches(EDITOR) || !form.closest("dialog") || !window.htmx) return;
    event.preventDefault();
    const queue = queueFor(form);
    queue.saveWanted = true;
    pump(queue);
  });

  document.addEventListener("click", function (event) {
    const move = event.target.closest("[data-entry-move]");
    const remove = event.target.closest("[data-entry-remove]");
    const add = event.target.closest("[data-entry-add]");
    if (!move && !remove && !add) return;
    const form = event.target.closest("form");
    const list = form && form.querySelector(".entry-list");
    if (!list) return;
    event.preventDefault();

    if (move) {
      const row = move.closest(".entry");
      const up = move.dataset.entryMove === "up";
      const sibling = up ? row.previousElementSibling : row.nextElementSibling;
      if (!sibling) return;
      if (up) list.insertBefore(row, sibling);
      else list.insertBefore(sibling, row);
      renumber(list);
      const rows = entryRows(list);
      const index = rows.indexOf(row);
      // Keep the keyboard where it was; if that button is now disabled, use its twin.
      const again = row.querySelector('[data-entry-move="' + move.dataset.entryMove + '"]');
      const twin = row.querySelector('[data-entry-move="' + (up ? "down" : "up") + '"]');
      (again && !again.disabled ? again : twin).focus();
      announce(list, "Entry moved to position " + (index + 1) + " of " + rows.length + ".");
      refreshQueue(form);
      return;
    }

    if (remove) {
      const row = remove.closest(".entry");
      row.remove();
      renumber(list);
      announce(list, "Entry removed.");
      const next = list.querySelector(".entry select") || form.querySelector("[data-entry-add]");
      if (next) next.focus();
      refreshQueue(form);
      return;
    }

    if (add) {
      const template = form.querySelector("template[data-entry-template]");
      if (!template || entryRows(list).length >= Number(list.dataset.max || 10)) return;
      const row = template.content.firstElementChild.cloneNode(true);
      list.append(row);
      renumber(list);
      if (window.htmx) window.htmx.process(row);
      const select = row.querySelector("select");
      if (select) select.focus();
      announce(list, "Entry " + entryRows(list).length + " added.");
      refreshQueue(form);
    }
  });

  function initSortable(list) {
    if (list._sortable || !window.Sortable) return;
    // forceFallback: mouse/touch events instead of native drag and drop, which behaves
    // the same in every browser and under automation.
    list._sortable = window.Sortable.create(list, {
      handle: ".drag-handle",
      draggable: ".entry",
      animation: 150,
      forceFallback: true,
      onStart: function () {
        // An answer that comes during the drag is stale: drop it, post again once dropped.
        const queue = queueFor(list.closest("form"));
        queue.dragging = true;
        queue.changes += 1;
        markBusy(queue);
      },
      onEnd: function (evt) {
        const form = list.closest("form");
        renumber(list);
        if (evt.oldIndex !== evt.newIndex) {
          announce(list, "Entry moved to position " + (evt.newIndex + 1) + ".");
        }
        if (form) {
          queueFor(form).dragging = false;
          refreshQueue(form);
        }
      },
    });
  }

  // The list page has no Sortable of its own: the editor partial names the script, loaded once on demand.
  let sortableLoading = null;

  function withSortable(then) {
    if (window.Sortable) return then();
    const holder = document.querySelector("[data-sortable-src]");
    const src = holder ? holder.dataset.sortableSrc : "";
    if (!src) return undefined;
    if (!sortableLoading) {
      sortableLoading = new Promise(function (resolve) {
        const script = document.createElement("script");
        script.src = src;
        script.onload = resolve;
        document.head.append(script);
      });
    }
    sortableLoading.then(then);
    return undefined;
  }

  function initEditor(root) {
    const lists = root.querySelectorAll ? root.querySelectorAll(".entry-list") : [];
    lists.forEach(function (list) {
      renumber(list);
      withSortable(function () { initSortable(list); });
    });
    // Scope target is meaningless for the global scope.
    const scopeTypes = root.querySelectorAll ? root.querySelectorAll("[data-scope-type]") : [];
    scopeTypes.forEach(function (select) {
      const target = select.form && select.form.querySelector("[data-scope-target]");
      if (target) target.disabled = select.value === "global";
    });
  }

  document.addEventListener("change", function (event) {
    if (event.target.matches && event.target.matches("[data-scope-type]")) {
      const target = event.target.form.querySelector("[data-scope-target]");
      if (target) target.disabled = event.target.value === "global";
    }
  });

  /* ---------- Editing in place: the chain editor in a modal over the list ----------
   * A link marked data-chain-modal (Add Chain, a chain's name, Edit) or a click anywhere else on a chain's
   * row opens the editor in <dialog id="chain-modal">, loaded over HTMX (HX-Target: chain-modal asks the
   * view for chains/_modal.html). The editor's own URL is pushed, so the edit can be linked (a direct visit
   * gets the full page) and Back closes it; closing it (Escape, ×, Cancel, saved) goes Back. The list's
   * history entry is marked as ours (htmx: false) so htmx does not restore a snapshot over the live list.
   * A save is answered with the list's table for the state the list shows (its URL travels as
   * HX-Current-URL), and chainModalSaved closes the modal; validation errors swap the form in the modal.
   */

  const MODAL = "chain-modal";

  function chainModal() {
    const dialog = document.getElementById(MODAL);
    return dialog instanceof HTMLDialogElement && typeof dialog.showModal === "function" ? dialog : null;
  }

  // Leave nothing behind: an old form's hx-preserve fields would be carried into the next one by id.
  function stopEditor(dialog) {
    if (dialog._chainQueue) dialog._chainQueue.dead = true;
    dialog._chainQueue = null;
    dialog._loadUrl = ""; // a load still out is not swapped in (see htmx:beforeSwap below)
    dialog.replaceChildren(); // a refresh still out finds its form detached: htmx swaps nothing
  }

  function loadEditor(dialog, url) {
    stopEditor(dialog);
    const wait = document.createElement("p");
    wait.className = "muted";
    wait.textContent = "Loading…";
    dialog.append(wait);
    dialog.setAttribute("aria-busy", "true");
    if (!dialog.open) dialog.showModal();
    dialog._loadUrl = url;
    const loaded = window.htmx.ajax("GET", url, { source: dialog, target: dialog, swap: "innerHTML" });
    const done = function () {
      dialog.removeAttribute("aria-busy");
      const first = dialog.querySelector("#id_name");
      if (first && dialog.open) first.focus();
    };
    if (loaded && loaded.then) loaded.then(done, done);
  }

  function openEditor(url, opener) {
    const dialog = chainModal();
    if (!dialog || !window.htmx || !url) return false;
    dialog._listUrl = location.href;
    dialog._opener = opener || null;
    const row = opener && opener.closest("tr[id]");
    dialog._openerRow = row ? row.id : "";
    history.replaceState(Object.assign({}, history.state, { htmx: false, cpChainList: true }), "");
    history.pushState({ cpChainModal: url, listUrl: dialog._listUrl }, "", url);
    loadEditor(dialog, url);
    return true;
  }

  document.addEventListener("click", function (event) {
    if (event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
    const link = event.target.closest && event.target.closest("a[data-chain-modal]");
    let url = "";
    let opener = null;
    if (link) {
      url = link.getAttribute("href");
      opener = link;
    } else {
      // A chain's row: the one whose cells hold its editor links.
      const row = event.target.closest && event.target.closest("#chain-table tbody > tr");
      if (!row || event.target.closest("a, button, input, select, label, form, dialog")) return;
      if (window.getSelection && String(window.getSelection())) return; // selecting text is not a click
      opener = row.querySelector("a[data-chain-modal][aria-label]") || row.querySelector("a[data-chain-modal]");
      url = opener ? opener.getAttribute("href") : "";
    }
    if (openEditor(url, opener)) event.preventDefault();
  });

  // The list's state, not the editor's address, is what the save's answer (the table) must show.
  document.addEventListener("htmx:configRequest", function (event) {
    const dialog = chainModal();
    const elt = event.detail.elt;
    if (dialog && dialog._listUrl && elt && elt.closest && elt.closest("#" + MODAL)) {
      event.detail.headers["HX-Current-URL"] = dialog._listUrl;
    }
  });

  // Only the load asked for last, into the open modal.
  document.addEventListener("htmx:beforeSwap", function (event) {
    const dialog = chainModal();
    if (!dialog || event.detail.target !== dialog) return;
    const path = event.detail.pathInfo ? event.detail.pathInfo.requestPath : "";
    if (!dialog.open || !dialog._loadUrl || path !== dialog._loadUrl) event.detail.shouldSwap = false;
  });

  document.addEventListener("chainModalSaved", function () {
    const dialog = chainModal();
    if (dialog && dialog.open) dialog.close();
  });

  // The chain could not be loaded (deleted meanwhile: the toast says so): nothing to show.
  document.addEventListener("htmx:responseError", function (event) {
    const dialog = chainModal();
    if (dialog && dialog.open && event.detail.target === dialog) dialog.close();
  });

  // The table was swapped (a save): focus goes back to the same row's link once the modal closes.
  document.addEventListener("htmx:afterSwap", function () {
    const dialog = chainModal();
    if (!dialog || !dialog._openerRow || (dialog._opener && dialog._opener.isConnected)) return;
    const row = document.getElementById(dialog._openerRow);
    dialog._opener = row && (row.querySelector("a[data-chain-modal][aria-label]") || row.querySelector("a[data-chain-modal]"));
  });

  document.addEventListener("close", function (event) {
    const dialog = event.target;
    if (!(dialog instanceof HTMLDialogElement) || dialog.id !== MODAL) return;
    stopEditor(dialog);
    const byHistory = dialog._closingByHistory;
    dialog._closingByHistory = false;
    if (!byHistory && history.state && history.state.cpChainModal) history.back();
  }, true);

  window.addEventListener("popstate", function (event) {
    const dialog = chainModal();
    if (!dialog) return;
    const state = event.state || {};
    if (state.cpChainModal) {
      // Forward into the editor again.
      dialog._listUrl = state.listUrl || dialog._listUrl;
      loadEditor(dialog, state.cpChainModal);
    } else if (dialog.open) {
      dialog._closingByHistory = true;
      dialog.close();
    }
  });

  /* ---------- Boot ---------- */

  function boot() {
    document.querySelectorAll("#toasts .toast").forEach(armToast);
    initEditor(document);
    // initEditor is idempotent, so it does not matter whether htmx already fired its first load.
    if (window.htmx) window.htmx.onLoad(initEditor);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", boot);
  } else {
    boot();
  }
})();

/* ==========================================================================
   Provider Health tab (appended; health/views.py, templates/health/).
   - One reset <dialog> serves every row: the Reset link that opens it fills in the circuit.
   - The circuit table polls and is swapped; an open dialog's opener is re-found by id so
     focus still returns to the row's Reset link after a refresh or a reset.
   - A dialog marked data-dialog-managed is not closed by the generic "answered, close"
     rule above: its forms swap its body (errors stay visible with the user's input), and
     the server closes it with HX-Trigger {"closeDialog": "<dialog id>"} on success.
   ========================================================================== */
(function () {
  "use strict";

  // Capture phase: runs before the generic opener above, so the dialog shows the right names.
  document.addEventListener("click", function (event) {
    const opener = event.target.closest && event.target.closest("[data-reset-provider]");
    if (!opener) return;
    const dialog = document.getElementById(opener.dataset.dialogOpen);
    if (!dialog) return;
    const provider = opener.dataset.resetProvider || "";
    const model = opener.dataset.resetModel || "";
    dialog.querySelectorAll("[data-reset-target]").forEach(function (el) {
      el.textContent = provider + " / " + model;
    });
    dialog.querySelectorAll("[data-reset-field]").forEach(function (input) {
      input.value = input.dataset.resetField === "provider" ? provider : model;
    });
  }, true);

  document.addEventListener("htmx:afterSwap", function () {
    document.querySelectorAll("dialog").forEach(function (dialog) {
      const opener = dialog._opener;
      if (opener && !opener.isConnected && opener.id) {
        const again = document.getElementById(opener.id);
        if (again) dialog._opener = again;
      }
    });
  });

  // Stop the generic afterRequest listener (bubble phase on document) for managed dialogs.
  document.addEventListener("htmx:afterRequest", function (event) {
    const target = event.target;
    if (target && target.closest && target.closest("dialog[data-dialog-managed]")) {
      event.stopPropagation();
    }
  }, true);

  document.addEventListener("closeDialog", function (event) {
    const detail = event.detail || {};
    const dialog = document.getElementById(detail.value || "");
    if (dialog instanceof HTMLDialogElement && dialog.open) dialog.close();
  });

  // After a swap inside a managed dialog, put the keyboard on the error summary when there is one: the
  // swapped part's own (a dialog may swap one of its forms and keep another's summary).
  document.addEventListener("htmx:afterSettle", function (event) {
    const dialog = event.target.closest && event.target.closest("dialog[data-dialog-managed]");
    if (!dialog || !dialog.open) return;
    const summary = event.target.querySelector("[data-error-summary]");
    if (summary) summary.focus();
  });

  // Closing (Cancel, Escape, saved) discards what was typed: fetch a fresh body for the next opening.
  document.addEventListener("close", function (event) {
    const dialog = event.target;
    if (!(dialog instanceof HTMLDialogElement) || !dialog.dataset.refreshUrl || !window.htmx) return;
    const target = dialog.dataset.refreshTarget;
    if (target && dialog.querySelector(target)) {
      window.htmx.ajax("GET", dialog.dataset.refreshUrl, { target: target, swap: "outerHTML" });
    }
  }, true);
})();

/* ==========================================================================
   Request Logs (requestlogs/views.py, templates/requestlogs/).
   - A row link loads the request into the drawer (<dialog id="log-drawer">) over HTMX and pushes
     /logs/<id>/. The modal dialog traps focus; Escape or × closes it and goes Back, so the list
     comes back from htmx's history cache exactly as it was (filters, rows, scroll), and focus
     returns to the row link that opened it. Back and Forward open and close it the same way.
   - A click anywhere on a row opens it; the custom time range opens its inputs instead of applying.
   ========================================================================== */
(function () {
  "use strict";

  const DETAIL_PATH = /^\/logs\/[0-9a-f]{32}\/$/;
  let openerId = null;

  function drawer() {
    return document.getElementById("log-drawer");
  }

  let drawerOpen = false; // a restore swaps the dialog away without a close event, so keep count here

  function openDrawer() {
    const d = drawer();
    if (d && !d.open && typeof d.showModal === "function") d.showModal();
    drawerOpen = Boolean(d && d.open);
  }

  function focusOpener() {
    const opener = openerId && document.getElementById(openerId);
    if (opener) opener.focus({ preventScroll: true });
  }

  // Anywhere on a row opens it (links and controls inside the row keep their own behaviour).
  document.addEventListener("click", function (event) {
    const row = event.target.closest && event.target.closest("tr[data-row-link]");
    if (!row || event.target.closest("a, button, input, select, label, summary")) return;
    if (window.getSelection && String(window.getSelection())) return; // selecting text is not a click
    const link = document.getElementById(row.dataset.rowLink);
    if (link) link.click();
  });

  document.addEventListener("click", function (event) {
    const opener = event.target.closest && event.target.closest("[data-drawer-open]");
    if (opener) openerId = opener.id;
    const closer = event.target.closest && event.target.closest("[data-drawer-close]");
    if (closer) {
      const d = closer.closest("dialog");
      if (d) {
        event.preventDefault();
        d.close();
      }
    }
  }, true);

  document.addEventListener("htmx:afterSwap", function (event) {
    const target = event.detail && event.detail.target;
    if (target && target.id === "log-drawer-body") openDrawer();
  });

  // Mark the history entry htmx pushed for the drawer, so closing knows it may go Back to the list.
  document.addEventListener("htmx:pushedIntoHistory", function (event) {
    const path = (event.detail && event.detail.path) || "";
    if (DETAIL_PATH.test(path.split("?")[0])) {
      history.replaceState(Object.assign({}, history.state, { cpDrawer: true }), "");
    }
  });

  let closing = false; // the drawer was just closed: the next restore is the list it came from

  document.addEventListener("close", function (event) {
    if (event.target.id !== "log-drawer") return;
    drawerOpen = false;
    if (history.state && history.state.cpDrawer && DETAIL_PATH.test(location.pathname)) {
      closing = true;
      history.back(); // htmx restores the list; focus follows in htmx:historyRestore
    } else {
      focusOpener();
    }
  }, true);

  document.addEventListener("htmx:historyRestore", function () {
    const d = drawer();
    const body = document.getElementById("log-drawer-body");
    const leftDrawer = closing || drawerOpen; // closed with Escape or ×, or left with Back
    closing = drawerOpen = false;
    if (!d) return;
    // A snapshot keeps the dialog's open attribute but not its modality.
    if (d.hasAttribute("open")) d.removeAttribute("open");
    if (DETAIL_PATH.test(location.pathname) && body && body.children.length) {
      // Forward into a drawer: htmx replaced this entry's state while restoring, so mark it again.
      history.replaceState(Object.assign({}, history.state, { cpDrawer: true }), "");
      openDrawer();
    } else if (leftDrawer) {
      focusOpener();
    }
  });

  /* ---------- Filters ---------- */

  // On a phone the filters start folded, so the requests come first (the summary says how many are active).
  function foldFiltersOnPhone() {
    if (!window.matchMedia || !window.matchMedia("(max-width: 720px)").matches) return;
    document.querySelectorAll("details[data-collapse-on-phone]").forEach(function (panel) {
      if (!panel.querySelector(".has-error")) panel.removeAttribute("open");
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", foldFiltersOnPhone);
  else foldFiltersOnPhone();

  function toggleCustom(select) {
    const form = select.form;
    const custom = form && form.querySelector("[data-range-custom]");
    if (!custom) return;
    if (select.value === "custom") custom.removeAttribute("data-collapsed");
    else custom.setAttribute("data-collapsed", "");
  }

  // Capture phase, before htmx's listener on the form: some changes must not apply the filters.
  document.addEventListener("change", function (event) {
    const el = event.target;
    if (el.matches && el.matches("[data-range-select]")) {
      toggleCustom(el);
      if (el.value === "custom") {
        event.stopPropagation(); // wait for the dates and Apply
        const from = el.form.querySelector("input[name=from]");
        if (from) from.focus();
      }
    } else if (el.matches && el.matches("[data-apply-on-submit]")) {
      event.stopPropagation(); // date inputs fire change on every segment; Apply sends them
    }
  }, true);
})();

/* ==========================================================================
   Swaps keep the operator's place (every list, poll and form partial).
   - Focus: htmx puts the keyboard back on an element with the same id after a swap (every control in a
     swapped region has a stable id). For one without, or whose id is gone (a page link that became the
     current page), the same control is found again by its address and name; failing that, the swapped
     region itself takes focus, so the keyboard never falls back to <body>.
   - Scroll: a scrolled .table-wrap keeps its scroll position across the swap (by id, else by position).
   - A swap or page that brings an error summary ([data-error-summary]) puts the keyboard on it (a poll
     does not move it; dialogs do this themselves, above).
   - Polled counts are announced by a role="status" element outside the polled region: the region
     carries a hidden copy ([data-live-for="<id>"]), copied in only when its text changed.
   - An out-of-band section marked data-oob-text (the alert banner, the Alerts page's rules and history)
     is left alone while its text is unchanged or a dialog in it is open: nothing is re-announced, and
     an open confirm step survives.
   ========================================================================== */
(function () {
  "use strict";

  const FOCUSABLE = "a[href], button, input, select, textarea, summary, [tabindex]";
  const GLYPHS = /[▲▼↕…]/g;

  function words(el) {
    return (el.getAttribute("aria-label") || el.textContent || "").replace(GLYPHS, "").replace(/\s+/g, " ").trim();
  }

  function address(el) {
    return el.getAttribute("hx-get") || el.getAttribute("href") || el.getAttribute("hx-post") ||
      (el.name ? el.name + "=" + el.value : "");
  }

  function isPoll(elt) {
    const trigger = elt && elt.getAttribute && elt.getAttribute("hx-trigger");
    return Boolean(trigger && /\bevery\b/.test(trigger));
  }

  let pending = null;

  document.addEventListener("htmx:beforeSwap", function (event) {
    pending = null;
    const detail = event.detail;
    const target = detail.target;
    if (!target || !detail.shouldSwap || !target.querySelectorAll) return;
    const scrolls = [];
    const wraps = Array.from(target.querySelectorAll(".table-wrap"));
    if (target.matches(".table-wrap")) wraps.unshift(target);
    wraps.forEach(function (wrap, index) {
      if (wrap.scrollTop || wrap.scrollLeft) scrolls.push({ id: wrap.id, index: index, top: wrap.scrollTop, left: wrap.scrollLeft });
    });
    const active = document.activeElement;
    const inside = active && active !== document.body && target.contains(active);
    pending = {
      targetId: target.id,
      scrolls: scrolls,
      focus: inside ? { id: active.id, tag: active.tagName, address: address(active), words: words(active) } : null,
    };
  });

  function findAgain(root, wanted) {
    const all = Array.from(root.querySelectorAll(FOCUSABLE)).filter(function (el) {
      return el.tagName === wanted.tag && !el.disabled && el.getClientRects().length;
    });
    const same = function (test) {
      const hits = all.filter(test);
      return hits.length === 1 ? hits[0] : null;
    };
    return same(function (el) { return address(el) === wanted.address && words(el) === wanted.words; }) ||
      (wanted.address ? same(function (el) { return address(el) === wanted.address; }) : null) ||
      (wanted.words ? same(function (el) { return words(el) === wanted.words; }) : null);
  }

  document.addEventListener("htmx:afterSwap", function (event) {
    const state = pending;
    pending = null;
    if (!state) return;
    const root = (state.targetId && document.getElementById(state.targetId)) ||
      (event.detail.target && event.detail.target.isConnected ? event.detail.target : null);
    if (!root) return;
    const wraps = Array.from(root.querySelectorAll(".table-wrap"));
    if (root.matches(".table-wrap")) wraps.unshift(root);
    state.scrolls.forEach(function (s) {
      const wrap = (s.id && document.getElementById(s.id)) || wraps[s.index];
      if (wrap) {
        wrap.scrollTop = s.top;
        wrap.scrollLeft = s.left;
      }
    });
    const active = document.activeElement;
    if (!state.focus || (active && active !== document.body && active.isConnected)) return;
    const again = (state.focus.id && document.getElementById(state.focus.id)) || findAgain(root, state.focus);
    const where = again || root;
    if (!again && !where.hasAttribute("tabindex")) where.setAttribute("tabindex", "-1");
    where.focus({ preventScroll: true });
  });

  function focusSummary(root) {
    const summary = root && root.querySelector && root.querySelector("[data-error-summary]");
    if (summary && !summary.closest("dialog")) {
      if (!summary.hasAttribute("tabindex")) summary.setAttribute("tabindex", "-1");
      summary.focus();
    }
  }

  document.addEventListener("htmx:afterSettle", function (event) {
    const config = (event.detail && event.detail.requestConfig) || {};
    // A poll, or the chain editor's refresh while the operator types, never moves the keyboard.
    if (isPoll(config.elt) || (config.parameters && config.parameters.op === "refresh")) return;
    focusSummary(event.target.matches && event.target.matches("[data-error-summary]") ? event.target.parentNode : event.target);
  });

  function copyLive(root) {
    if (!root || !root.querySelectorAll) return;
    const sources = Array.from(root.querySelectorAll("[data-live-for]"));
    if (root.matches && root.matches("[data-live-for]")) sources.push(root);
    sources.forEach(function (source) {
      const region = document.getElementById(source.dataset.liveFor);
      const text = source.textContent.replace(/\s+/g, " ").trim();
      if (region && region.textContent.replace(/\s+/g, " ").trim() !== text) region.textContent = text;
    });
  }

  document.addEventListener("htmx:afterSettle", function (event) { copyLive(event.target); });

  document.addEventListener("htmx:oobBeforeSwap", function (event) {
    const target = event.detail.target;
    if (!target || !target.hasAttribute || !target.hasAttribute("data-oob-text")) return;
    const fragment = event.detail.fragment;
    const same = fragment && fragment.textContent.replace(/\s+/g, " ").trim() === target.textContent.replace(/\s+/g, " ").trim();
    if (same || target.querySelector("dialog[open]") || target.querySelector("details.confirm-inline[open]")) {
      event.detail.shouldSwap = false;
    }
  });

  function boot() {
    focusSummary(document.getElementById("main"));
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", boot);
  else boot();
})();
