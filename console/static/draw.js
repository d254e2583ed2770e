// trainflow console: the drawing canvas of a float_vector input (the
// try-it form of an image model). Every stroke writes the canvas's
// pixels, 0–255 in row-major order, into the input's textarea, which the
// form posts; typing into the textarea repaints the canvas. Served as a
// same-origin static file: the console's Content-Security-Policy allows
// no inline script.
(function () {
  "use strict";

  function numbers(text) {
    return text.split(/[\s,\[\]]+/).filter(function (s) { return s !== ""; }).map(Number);
  }

  function setup(canvas) {
    var target = document.getElementById(canvas.dataset.target);
    if (!target) {
      return;
    }
    var n = canvas.width;
    var ctx = canvas.getContext("2d");
    var px = new Float64Array(n * n);

    function load() {
      var v = numbers(target.value);
      if (v.length !== px.length || !v.every(isFinite)) {
        return false;
      }
      for (var i = 0; i < px.length; i++) {
        px[i] = Math.max(0, Math.min(255, v[i]));
      }
      return true;
    }
    function paint() {
      var img = ctx.createImageData(n, n);
      for (var i = 0; i < px.length; i++) {
        var v = Math.round(px[i]);
        img.data[4 * i] = v;
        img.data[4 * i + 1] = v;
        img.data[4 * i + 2] = v;
        img.data[4 * i + 3] = 255;
      }
      ctx.putImageData(img, 0, 0);
    }
    function write() {
      var out = new Array(px.length);
      for (var i = 0; i < px.length; i++) {
        out[i] = Math.round(px[i]);
      }
      target.value = out.join(" ");
    }
    // brush whitens the pixels within about 1.5 pixels of the pointer,
    // softly at the edge, as a pen stroke in the training images.
    function brush(ev) {
      var r = canvas.getBoundingClientRect();
      var x = (ev.clientX - r.left) / r.width * n;
      var y = (ev.clientY - r.top) / r.height * n;
      for (var j = Math.floor(y) - 2; j <= Math.floor(y) + 2; j++) {
        for (var i = Math.floor(x) - 2; i <= Math.floor(x) + 2; i++) {
          if (i < 0 || j < 0 || i >= n || j >= n) {
            continue;
          }
          var d = Math.hypot(i + 0.5 - x, j + 0.5 - y);
          var v = 255 * Math.max(0, Math.min(1, 1.8 - d));
          if (v > px[j * n + i]) {
            px[j * n + i] = v;
          }
        }
      }
      paint();
      write();
    }

    var down = false;
    canvas.addEventListener("pointerdown", function (ev) {
      down = true;
      if (canvas.setPointerCapture) {
        canvas.setPointerCapture(ev.pointerId);
      }
      brush(ev);
      ev.preventDefault();
    });
    canvas.addEventListener("pointermove", function (ev) {
      if (down) {
        brush(ev);
      }
    });
    canvas.addEventListener("pointerup", function () { down = false; });
    canvas.addEventListener("pointercancel", function () { down = false; });
    target.addEventListener("input", function () {
      if (load()) {
        paint();
      }
    });
    document.querySelectorAll('button.draw-clear[data-canvas="' + canvas.id + '"]').forEach(function (b) {
      b.addEventListener("click", function () {
        px.fill(0);
        paint();
        write();
      });
    });
    if (!load()) {
      write(); // an empty (or unreadable) box starts as a black image
    }
    paint();
  }

  document.querySelectorAll("canvas.draw").forEach(setup);
})();
