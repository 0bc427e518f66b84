// mcpauth's only script: the passkey ceremonies (WebAuthn) of the sign-in, second-step and
// account pages. A form marked data-passkey="create" or "get" carries the server's options in
// data-options; on submit the browser asks the authenticator, the answer goes in the form's
// hidden "credential" field and the form is posted. Without WebAuthn the forms stay hidden.
"use strict";
(function () {
  function bytes(text) {
    var b64 = text.replace(/-/g, "+").replace(/_/g, "/");
    var raw = atob(b64 + "===".slice((b64.length + 3) % 4));
    return Uint8Array.from(raw, function (c) { return c.charCodeAt(0); });
  }
  function text(buffer) {
    var raw = String.fromCharCode.apply(null, new Uint8Array(buffer));
    return btoa(raw).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }
  function ids(list) {
    return (list || []).map(function (d) { return Object.assign({}, d, { id: bytes(d.id) }); });
  }
  function publicKey(kind, options) {
    options.challenge = bytes(options.challenge);
    if (kind === "create") {
      options.user.id = bytes(options.user.id);
      options.excludeCredentials = ids(options.excludeCredentials);
    } else {
      options.allowCredentials = ids(options.allowCredentials);
    }
    return options;
  }
  function answer(credential) {
    var r = credential.response, response = { clientDataJSON: text(r.clientDataJSON) };
    if (r.attestationObject) {
      response.attestationObject = text(r.attestationObject);
      response.transports = r.getTransports ? r.getTransports() : [];
    } else {
      response.authenticatorData = text(r.authenticatorData);
      response.signature = text(r.signature);
      response.userHandle = r.userHandle ? text(r.userHandle) : null;
    }
    return JSON.stringify({
      id: credential.id, rawId: text(credential.rawId), type: credential.type,
      response: response, clientExtensionResults: credential.getClientExtensionResults(),
      authenticatorAttachment: credential.authenticatorAttachment || null
    });
  }
  if (!window.PublicKeyCredential || !navigator.credentials) return;
  document.querySelectorAll("form[data-passkey]").forEach(function (form) {
    var kind = form.dataset.passkey, error = form.querySelector("[data-passkey-error]");
    form.hidden = false;
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      if (error) error.hidden = true;
      var options = { publicKey: publicKey(kind, JSON.parse(form.dataset.options)) };
      var ceremony = kind === "create" ? navigator.credentials.create(options)
        : navigator.credentials.get(options);
      ceremony.then(function (credential) {
        form.elements.credential.value = answer(credential);
        form.submit();
      }, function () {
        if (error) {
          error.textContent = "The passkey wasn't used. Try again, or use another way.";
          error.hidden = false;
        }
      });
    });
  });
})();
