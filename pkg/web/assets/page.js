// The page follows the log: the server says "changed" on /live whenever
// the log moves, and the view's content is fetched again and put in place,
// keeping open what the viewer opened.
(function () {
  'use strict';
  var main = document.getElementById('view');
  var dot = document.getElementById('live');
  if (!main || main.dataset.live !== '1' || !window.EventSource) {
    return;
  }
  var busy = false;
  var again = false;
  function refresh() {
    if (busy) {
      again = true;
      return;
    }
    busy = true;
    var open = Array.prototype.map.call(main.querySelectorAll('details[open]'), function (d) { return d.id; });
    fetch(location.href, {headers: {'X-E31-Fragment': '1'}, credentials: 'same-origin', cache: 'no-store'})
      .then(function (r) {
        if (r.status === 401) {
          location.assign('/login');
          return null;
        }
        return r.text();
      })
      .then(function (html) {
        if (html === null) {
          return;
        }
        main.innerHTML = html;
        open.forEach(function (id) {
          var d = id && document.getElementById(id);
          if (d) {
            d.open = true;
          }
        });
        main.dataset.refreshed = String(Number(main.dataset.refreshed || 0) + 1);
      })
      .catch(function () { /* the next change tries again */ })
      .then(function () {
        busy = false;
        if (again) {
          again = false;
          refresh();
        }
      });
  }
  var es = new EventSource('/live?since=' + encodeURIComponent(main.dataset.version || '0'));
  es.addEventListener('changed', refresh);
  es.onopen = function () {
    if (dot) {
      dot.classList.add('on');
    }
  };
  es.onerror = function () {
    if (dot) {
      dot.classList.remove('on');
    }
  };
}());
