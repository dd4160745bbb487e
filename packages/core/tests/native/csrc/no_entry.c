/* A shared object that is not a backend: it exports no nnp_backend_entry. */
int not_a_backend(int x)
{
    return x + 1;
}
