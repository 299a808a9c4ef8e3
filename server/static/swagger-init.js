// jaxport: starts Swagger UI on the page server/_docs.py renders. A file of its own, so that the
// page's Content-Security-Policy allows scripts from the server only (no inline script).
window.addEventListener("load", function () {
  var root = document.getElementById("swagger-ui");
  window.ui = SwaggerUIBundle({
    url: root.getAttribute("data-openapi-url"),
    dom_id: "#swagger-ui",
    deepLinking: true,
    presets: [SwaggerUIBundle.presets.apis],
    layout: "BaseLayout",
  });
});
