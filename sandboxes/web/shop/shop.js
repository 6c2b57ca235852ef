// The shop's state lives in sessionStorage: each browser context (one per trajectory) starts empty.
const PRODUCTS = [
  {id: "mug", name: "Enamel mug", price: 12.5},
  {id: "tee", name: "Cotton T-shirt", price: 18.0},
  {id: "lamp", name: "Desk lamp", price: 34.9},
  {id: "socks", name: "Wool socks", price: 9.0},
];
function productById(id) { return PRODUCTS.find((p) => p.id === id) || null; }
function cart() { return JSON.parse(sessionStorage.getItem("cart") || "[]"); }
function saveCart(c) { sessionStorage.setItem("cart", JSON.stringify(c)); }
function addToCart(id, size, qty) {
  const c = cart(), line = c.find((l) => l.id === id && l.size === size);
  if (line) line.qty = Math.min(9, line.qty + qty); else c.push({id, size, qty});
  saveCart(c);
}
function removeLine(i) { const c = cart(); c.splice(i, 1); saveCart(c); }
function placeOrder(email) {
  const c = cart(), n = 1000 + Number(sessionStorage.getItem("orders") || "0") + 1;
  const total = c.reduce((s, l) => s + productById(l.id).price * l.qty, 0);
  const items = c.reduce((s, l) => s + l.qty, 0);
  sessionStorage.setItem("orders", String(n - 1000));
  sessionStorage.setItem("last", JSON.stringify({number: n, items, total, email}));
  saveCart([]);
  return n;
}
function lastOrder() { return JSON.parse(sessionStorage.getItem("last") || "null"); }
function renderProducts(ul, q = "") {
  let n = 0;
  for (const p of PRODUCTS) {
    if (q && !p.name.toLowerCase().includes(q)) continue;
    const li = document.createElement("li"), a = document.createElement("a");
    a.href = `product.html?id=${p.id}`; a.textContent = p.name;
    li.append(a, ` $${p.price.toFixed(2)}`); ul.append(li); n++;
  }
  return n;
}
function renderCartLink() {
  const n = cart().reduce((s, l) => s + l.qty, 0);
  document.getElementById("cart-link").textContent = `Cart (${n})`;
}
